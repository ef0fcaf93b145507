package envconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/envconfig"
)

func getenv(env map[string]string) func(string) string {
	return func(name string) string { return env[name] }
}

// Every reader, set and unset: a set value is parsed, an unset or empty one gives the
// fallback, and nothing is reported.
func TestEnvReadsValuesAndFallbacks(t *testing.T) {
	t.Parallel()
	env := envconfig.New(getenv(map[string]string{
		"S":     "text",
		"L":     " a, b ,,c ",
		"COMMA": ",",
		"B":     "true",
		"I":     "-3",
		"PI":    "7",
		"F":     "0.25",
		"D":     "-1s",
		"PD":    "1m30s",
		"EMPTY": "",
	}))

	got := []any{
		env.String("S", "fb"), env.String("EMPTY", "fb"),
		env.List("L", "x"), env.List("COMMA", "x"), env.List("UNSET", "x", "y"),
		env.Bool("B", false), env.Bool("UNSET", true),
		env.Int("I", 1), env.Int("UNSET", 16),
		env.PositiveInt("PI", 1), env.PositiveInt("UNSET", 0),
		env.Float("F", 1), env.Float("UNSET", 0.5),
		env.Duration("D", time.Second), env.Duration("UNSET", 45*time.Second),
		env.PositiveDuration("PD", 0), env.PositiveDuration("UNSET", 0),
	}

	want := []any{
		"text", "fb",
		[]string{"a", "b", "c"}, []string(nil), []string{"x", "y"},
		true, true,
		-3, 16,
		7, 0,
		0.25, 0.5,
		-time.Second, 45 * time.Second,
		90 * time.Second, time.Duration(0),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	if err := env.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
}

// A value that does not parse is reported with the variable, the value and how to fix
// it, and the reader returns the fallback.
func TestEnvReportsWhatDoesNotParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		read     func(*envconfig.Env) any
		value    string
		fallback any
		want     []string
	}{
		{"bool", func(e *envconfig.Env) any { return e.Bool("V", false) }, "yes please", false,
			[]string{`V="yes please" is not a boolean`, "true or false", "unset for the default (false)"}},
		{"int", func(e *envconfig.Env) any { return e.Int("V", 16) }, "many", 16,
			[]string{`V="many" is not an integer`, "e.g. 16", "default (16)"}},
		{"positive int, zero", func(e *envconfig.Env) any { return e.PositiveInt("V", 0) }, "0", 0,
			[]string{`V="0" is not a positive integer`, "at least 1", "leave it unset for the default"}},
		{"positive int, negative", func(e *envconfig.Env) any { return e.PositiveInt("V", 4) }, "-4", 4,
			[]string{`V="-4" is not a positive integer`, "e.g. 4"}},
		{"float", func(e *envconfig.Env) any { return e.Float("V", 0) }, "half", 0.0,
			[]string{`V="half" is not a number`, "0.5"}},
		{"duration", func(e *envconfig.Env) any { return e.Duration("V", 45*time.Second) }, "ten minutes", 45 * time.Second,
			[]string{`V="ten minutes" is not a duration`, "500ms, 30s or 720h", "default (45s)"}},
		{"positive duration, zero", func(e *envconfig.Env) any { return e.PositiveDuration("V", 0) }, "0s", time.Duration(0),
			[]string{`V="0s" is not a positive duration`, "500ms"}},
		{"positive duration, no unit", func(e *envconfig.Env) any { return e.PositiveDuration("V", 0) }, "30", time.Duration(0),
			[]string{`V="30" is not a positive duration`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := envconfig.New(getenv(map[string]string{"V": tt.value}))

			got := tt.read(env)

			if diff := cmp.Diff(tt.fallback, got); diff != "" {
				t.Errorf("value of a bad variable (-want fallback +got):\n%s", diff)
			}
			err := env.Err()
			if err == nil {
				t.Fatalf("Err() = nil, want an error about V=%q", tt.value)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Err() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

// Every mistake is reported at once, not only the first.
func TestEnvReportsEveryMistake(t *testing.T) {
	t.Parallel()
	env := envconfig.New(getenv(map[string]string{"A": "x", "B": "y", "C": "ok"}))

	env.Int("A", 1)
	env.Duration("B", time.Second)
	env.String("C", "")

	err := env.Err()
	if err == nil {
		t.Fatal("Err() = nil, want errors about A and B")
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 2 {
		t.Errorf("Err() has %d lines, want 2 (A and B):\n%s", got, err)
	}
	for _, want := range []string{`A="x"`, `B="y"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %q, want it to contain %q", err, want)
		}
	}
}
