package api

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// apiBenchConfig is the API benchmark's settings, from its flags. The defaults are
// those of the reported figures; the flags are for shorter runs while iterating and
// for looking inside one.
type apiBenchConfig struct {
	// rounds is how many times each phase runs, alternating API and pgbench.
	rounds int
	// duration is each measured phase.
	duration time.Duration
	// withRelays adds the rounds with each relay in the API's process (relays.go).
	withRelays bool
	// cpuProfile, if set, is where a CPU profile of the API process goes, taken from its
	// admin listener during one more attack after the measured rounds, so that profiling
	// never lowers a reported figure.
	cpuProfile string
}

func parseAPIFlags(args []string, stdout io.Writer) (apiBenchConfig, error) {
	c := apiBenchConfig{rounds: apiBenchRounds, duration: apiBenchDuration, withRelays: true}
	fs := flag.NewFlagSet("bench api", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.IntVar(&c.rounds, "rounds", c.rounds, "rounds of the API and of pgbench, alternating; the best of each is kept")
	fs.DurationVar(&c.duration, "duration", c.duration, "each measured attack and each pgbench run")
	fs.BoolVar(&c.withRelays, "relays", c.withRelays, "then measure the API with each relay (RELAY_MODE=poll, cdc)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the API process during one more attack to this file")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: bench api takes only flags", fs.Args())
	}
	if c.rounds < 1 {
		return c, errors.New("-rounds must be at least 1")
	}
	if c.duration < time.Second {
		return c, fmt.Errorf("-duration %s: measure for at least 1s", c.duration)
	}
	return c, nil
}
