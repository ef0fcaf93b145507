package benchenv

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// NoFlags is the flag parser, for Run, of the benchmark name that has no flags: it
// rejects any argument and answers -h.
func NoFlags(name string) func(args []string, stdout io.Writer) (struct{}, error) {
	return func(args []string, stdout io.Writer) (struct{}, error) {
		fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
		fs.SetOutput(stdout)
		if err := fs.Parse(args); err != nil {
			return struct{}{}, fmt.Errorf("parse flags: %w", err)
		}
		if fs.NArg() > 0 {
			return struct{}{}, fmt.Errorf("unexpected arguments %q: bench %s takes none", fs.Args(), name)
		}
		return struct{}{}, nil
	}
}

// LoadAverage is the 1-minute load average, or -1 where /proc/loadavg does not exist.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return -1
	}
	f, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return f
}
