// Package mutants is the mutation suite of `make chaos-mutants`: the bugs students
// really write, each kept in mutants/ as a small patch to this service, each built in a
// scratch copy of the repository and run against the chaos scenarios that should catch
// it. A mutant is killed when one of its scenarios ends in FAIL; INVALID (the faults did
// not bite) is not a kill, and a patch that no longer applies or builds is an error of
// the suite, never a kill. The suite's score is only as good as the verdict: a mutant
// that survives shows a bug `make chaos` would let through.
//
// A patch is a `git diff` preceded by a header of "Key: value" lines (a value continues
// on the lines indented below it), which git apply skips:
//
//	Bug: what the mutant does wrong, in the words of a code review.
//	Lesson: the rule of the course it breaks.
//	Scenarios: the scenarios that should catch it, in the order to run them.
//	Verdict row: the row of the verdict table that should fail.
//	If it survives: why it might, and what scenario or check would catch it.
//	Relay mode: poll or cdc, the RELAY_MODE its scenarios run our API with; optional,
//	poll when absent (a mutant of the CDC relay says cdc).
package mutants

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A Mutant is one patch of mutants/ and what its header says about it.
type Mutant struct {
	// Name is the patch's file name without .patch, e.g. "06-no-dedup".
	Name string `json:"name"`
	// Path is the patch file.
	Path string `json:"patch"`
	// Bug, Lesson, VerdictRow and IfItSurvives are the header's fields.
	Bug          string `json:"bug"`
	Lesson       string `json:"lesson"`
	VerdictRow   string `json:"verdict_row"`
	IfItSurvives string `json:"if_it_survives"`
	// Scenarios should catch the mutant, in the order they are run.
	Scenarios []string `json:"scenarios"`
	// RelayMode is the RELAY_MODE its scenarios run with (the optional "Relay mode"
	// field): verdict.RelayModePoll unless the header says otherwise.
	RelayMode string `json:"relay_mode"`
}

// headerKeys are the fields every patch header must have.
var headerKeys = []string{"Bug", "Lesson", "Scenarios", "Verdict row", "If it survives"}

// Load reads every *.patch of dir, in name order. A patch without a complete header, or
// naming a scenario that does not exist, is an error: the suite must not run half-described
// mutants.
func Load(dir string) ([]Mutant, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil {
		return nil, fmt.Errorf("list patches: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("load mutants: no *.patch in %s", dir)
	}
	slices.Sort(paths)
	mutants := make([]Mutant, 0, len(paths))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read patch: %w", err)
		}
		m, err := parse(strings.TrimSuffix(filepath.Base(path), ".patch"), b)
		if err != nil {
			return nil, fmt.Errorf("patch %s: %w", path, err)
		}
		m.Path = path
		mutants = append(mutants, m)
	}
	return mutants, nil
}

// parse reads the header of a patch, everything before its first "diff --git" line.
func parse(name string, patch []byte) (Mutant, error) {
	fields := map[string]string{}
	var key string
	diffs := 0
	sc := bufio.NewScanner(bytes.NewReader(patch))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "diff --git ") {
			diffs++
		}
		if diffs > 0 || strings.TrimSpace(line) == "" {
			continue
		}
		if key != "" && (line[0] == ' ' || line[0] == '\t') {
			fields[key] += " " + strings.TrimSpace(line)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return Mutant{}, fmt.Errorf("header line %q: want \"Key: value\" or an indented continuation", line)
		}
		key = k
		fields[key] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return Mutant{}, fmt.Errorf("read header: %w", err)
	}
	if diffs == 0 {
		return Mutant{}, fmt.Errorf("no \"diff --git\" section: make the patch with git diff")
	}
	for _, k := range headerKeys {
		if fields[k] == "" {
			return Mutant{}, fmt.Errorf("header has no %q field (want %s)", k, strings.Join(headerKeys, ", "))
		}
	}
	m := Mutant{
		Name: name, Bug: fields["Bug"], Lesson: fields["Lesson"],
		VerdictRow: fields["Verdict row"], IfItSurvives: fields["If it survives"],
		RelayMode: cmp.Or(fields["Relay mode"], verdict.RelayModePoll),
	}
	if !verdict.ValidRelayMode(m.RelayMode) {
		return Mutant{}, fmt.Errorf("relay mode %q: want %s or %s", m.RelayMode, verdict.RelayModePoll, verdict.RelayModeCDC)
	}
	for _, s := range strings.Split(fields["Scenarios"], ",") {
		s = strings.TrimSpace(s)
		// The dual-write scenario runs the teaching handler instead of the service's
		// own write path, so it says nothing about a mutant of that path.
		if !chaos.IsScenario(s) || s == "all" || s == "dual-write" {
			return Mutant{}, fmt.Errorf("scenario %q: want some of %s except dual-write", s, strings.Join(chaos.ScenarioNames(), ", "))
		}
		m.Scenarios = append(m.Scenarios, s)
	}
	return m, nil
}
