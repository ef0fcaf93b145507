package mutants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos"
)

// Score is the suite's headline: how many mutants some scenario killed.
type Score struct {
	Killed  int `json:"killed"`
	Mutants int `json:"mutants"`
	// SuiteErrors are mutants that could not be tried (patch or build broken).
	SuiteErrors int `json:"suite_errors"`
	// Percent is 100 * Killed / Mutants: a suite error counts as not killed.
	Percent float64 `json:"mutation_score_percent"`
}

// ScoreOf counts the results.
func ScoreOf(results []Result) Score {
	s := Score{Mutants: len(results)}
	for _, r := range results {
		if r.KilledBy != "" {
			s.Killed++
		}
		if r.SuiteError != "" {
			s.SuiteErrors++
		}
	}
	if s.Mutants > 0 {
		s.Percent = float64(100*s.Killed) / float64(s.Mutants)
	}
	return s
}

// PrintTable writes the bug × scenario table, the score, and each survivor with what
// would catch it. A "-" is a scenario that is not one of the mutant's.
func PrintTable(w io.Writer, results []Result) {
	var columns []string
	for _, name := range chaos.ScenarioNames() {
		for _, r := range results {
			if slices.Contains(r.Scenarios, name) && !slices.Contains(columns, name) {
				columns = append(columns, name)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "mutant\t%s\tresult\n", strings.Join(columns, "\t"))
	for _, r := range results {
		cells := make([]string, len(columns))
		for i, name := range columns {
			cells[i] = "-"
			for _, run := range r.Runs {
				if run.Scenario == name {
					cells[i] = cell(run)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, strings.Join(cells, "\t"), verdictOf(r))
	}
	tw.Flush()

	s := ScoreOf(results)
	fmt.Fprintf(w, "\nmutation score: %d of %d killed (%.0f%%)", s.Killed, s.Mutants, s.Percent)
	if s.SuiteErrors > 0 {
		fmt.Fprintf(w, "; %d SUITE ERRORS (a patch that no longer applies or builds): fix the patches", s.SuiteErrors)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if r.KilledBy == "" && r.SuiteError == "" {
			fmt.Fprintf(w, "  survivor %s: %s\n", r.Name, r.IfItSurvives)
		}
	}
}

// cell is one scenario run in the table: the outcome, with the verdict of a survivor
// (PASS and INVALID call for different fixes of the harness).
func cell(run ScenarioResult) string {
	if run.Outcome == Survived {
		return "survived (" + run.Verdict + ")"
	}
	return string(run.Outcome)
}

func verdictOf(r Result) string {
	switch {
	case r.SuiteError != "":
		return "SUITE ERROR"
	case r.KilledBy != "":
		return "killed by " + r.KilledBy
	default:
		return "SURVIVED"
	}
}

// A Report is reports/mutants.json.
type Report struct {
	GeneratedAt time.Time `json:"generated_at"`
	// Short and Payments say how the scenarios were run; All whether every scenario of
	// a mutant ran, or only those up to the first kill.
	Short    bool     `json:"short"`
	Payments int      `json:"payments"`
	All      bool     `json:"all"`
	Score    Score    `json:"score"`
	Mutants  []Result `json:"mutants"`
}

// WriteReport writes the results as JSON to path. Patch paths are made relative to
// root, so the file reads the same from any checkout.
func WriteReport(path, root string, cfg Config, results []Result) error {
	cfg = cfg.withDefaults()
	rel := make([]Result, len(results))
	for i, r := range results {
		if p, err := filepath.Rel(root, r.Path); err == nil {
			r.Path = p
		}
		rel[i] = r
	}
	report := Report{
		GeneratedAt: time.Now().UTC().Truncate(time.Second),
		Short:       cfg.Short, Payments: cfg.Payments, All: cfg.All,
		Score: ScoreOf(results), Mutants: rel,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// The checks read "want > 0"; keep them readable rather than HTML-safe.
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		return fmt.Errorf("encode mutants report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write mutants report: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write mutants report: %w", err)
	}
	return nil
}
