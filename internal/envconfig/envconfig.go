// Package envconfig reads a binary's settings from its environment, the same way in
// every binary of this repository.
//
// The environment comes in as a getenv function, so that tests pass a map and nothing
// under internal/ touches the process environment. An unset or empty variable takes
// the fallback the caller gives. A value that does not parse does not stop the reading:
// the Env collects one error per variable, each naming it and saying how to fix it, so
// that an operator fixes every mistake in one go instead of one per restart.
//
//	env := envconfig.New(getenv)
//	addr := env.String("HTTP_ADDR", "127.0.0.1:8080")
//	workers := env.PositiveInt("RELAY_WORKERS", 0) // 0: leave the default to the relay
//	if err := env.Err(); err != nil { ... }
//
// Checks that relate several variables, or need more than a parse (a host:port, a URL),
// belong to the binary's own Validate.
package envconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Env reads variables through getenv and remembers what did not parse. Use one Env per
// load; it is not safe for concurrent use.
type Env struct {
	getenv func(string) string
	errs   []error
}

// New returns an Env that reads through getenv, for example os.Getenv.
func New(getenv func(string) string) *Env {
	return &Env{getenv: getenv}
}

// Err reports every value that did not parse, joined, or nil.
func (e *Env) Err() error {
	return errors.Join(e.errs...)
}

// lookup returns the value of name, or ok false when it is unset or empty. Empty counts
// as unset because that is what `NAME= cmd` and a blank line in an env file mean.
func (e *Env) lookup(name string) (value string, ok bool) {
	value = e.getenv(name)
	return value, value != ""
}

// fail records a value that does not parse.
func (e *Env) fail(name, value, problem, fix string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q %s: %s", name, value, problem, fix))
}

// orUnset ends a fix with the other way out: unsetting the variable. It names the
// default when the caller knows it (known), not when the zero value leaves the default
// to the component being configured.
func orUnset(known bool, fallback string) string {
	if !known {
		return ", or leave it unset for the default"
	}
	return ", or leave it unset for the default (" + fallback + ")"
}

// String returns the value of name, or fallback when it is unset.
func (e *Env) String(name, fallback string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return fallback
}

// List returns the comma-separated value of name with blanks trimmed and empty items
// dropped, or fallback when it is unset. A value of only commas gives an empty list,
// which the caller's Validate can report as such.
func (e *Env) List(name string, fallback ...string) []string {
	v, ok := e.lookup(name)
	if !ok {
		return fallback
	}
	var items []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// Bool returns the boolean value of name (true, false, 1, 0 and the other spellings
// strconv.ParseBool accepts), or fallback when it is unset.
func (e *Env) Bool(name string, fallback bool) bool {
	v, ok := e.lookup(name)
	if !ok {
		return fallback
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, v, "is not a boolean", "set it to true or false"+orUnset(true, strconv.FormatBool(fallback)))
		return fallback
	}
	return b
}

// Int returns the integer value of name, or fallback when it is unset.
func (e *Env) Int(name string, fallback int) int {
	return e.integer(name, fallback, false)
}

// PositiveInt is Int for counts and sizes, where zero or less is always a mistake: such
// a value is reported instead of returned. A fallback of 0 lets the caller leave the
// default to the component it configures (its zero value means "default").
func (e *Env) PositiveInt(name string, fallback int) int {
	return e.integer(name, fallback, true)
}

func (e *Env) integer(name string, fallback int, positive bool) int {
	v, ok := e.lookup(name)
	if !ok {
		return fallback
	}
	kind, fix := "an integer", "set a whole number"
	if positive {
		kind, fix = "a positive integer", "set a whole number of at least 1"
	}
	if fallback != 0 {
		fix += fmt.Sprintf(", e.g. %d", fallback)
	}
	fix += orUnset(fallback != 0, strconv.Itoa(fallback))
	n, err := strconv.Atoi(v)
	if err != nil || (positive && n < 1) {
		e.fail(name, v, "is not "+kind, fix)
		return fallback
	}
	return n
}

// Float returns the floating-point value of name, or fallback when it is unset.
func (e *Env) Float(name string, fallback float64) float64 {
	v, ok := e.lookup(name)
	if !ok {
		return fallback
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.fail(name, v, "is not a number", "set a decimal number such as 0.5"+orUnset(true, strconv.FormatFloat(fallback, 'g', -1, 64)))
		return fallback
	}
	return f
}

// Duration returns the value of name in Go syntax (500ms, 30s, 720h), or fallback when
// it is unset.
func (e *Env) Duration(name string, fallback time.Duration) time.Duration {
	return e.duration(name, fallback, false)
}

// PositiveDuration is Duration for timeouts, intervals and retentions, where zero or
// less is always a mistake: such a value is reported instead of returned. A fallback
// of 0 leaves the default to the component it configures, as with PositiveInt.
func (e *Env) PositiveDuration(name string, fallback time.Duration) time.Duration {
	return e.duration(name, fallback, true)
}

func (e *Env) duration(name string, fallback time.Duration, positive bool) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return fallback
	}
	kind := "a duration"
	if positive {
		kind = "a positive duration"
	}
	fix := "use Go syntax such as 500ms, 30s or 720h" + orUnset(fallback != 0, fallback.String())
	d, err := time.ParseDuration(v)
	if err != nil || (positive && d <= 0) {
		e.fail(name, v, "is not "+kind, fix)
		return fallback
	}
	return d
}
