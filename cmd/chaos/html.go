package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/timeline"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// writePage writes the HTML page of one run next to its JSON report.
func writePage(dir string, r *verdict.Report, stdout io.Writer) error {
	path, err := timeline.WritePage(dir, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  timeline: %s\n", path)
	return nil
}

// writeIndex writes the index of the scenarios that ran, in the order they ran.
func writeIndex(dir string, names []string, reports map[string]*verdict.Report, stdout io.Writer) error {
	var ran []*verdict.Report
	for _, name := range names {
		if r := reports[name]; r != nil {
			ran = append(ran, r)
		}
	}
	path, err := timeline.WriteIndex(dir, ran)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nevery scenario side by side: %s\n", path)
	return nil
}

// rebuildPages is `chaos html`: it rewrites every page, and the index when there are
// several, from the JSON reports of a directory, without running anything, as after a
// change of the pages' layout. One report has no index: nothing to set side by side
// (docs/sample holds only the default run's).
func rebuildPages(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("chaos html", flag.ContinueOnError)
	dir := flags.String("dir", "", "directory of the chaos-<scenario>.json reports (default: the repository's reports/)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		root, err := repo.Root()
		if err != nil {
			return err
		}
		*dir = filepath.Join(root, "reports")
	}
	var names []string
	reports := map[string]*verdict.Report{}
	for _, name := range chaos.ScenarioNames() {
		b, err := os.ReadFile(filepath.Join(*dir, "chaos-"+name+".json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read report: %w", err)
		}
		var r verdict.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("decode chaos-%s.json: %w", name, err)
		}
		reports[name] = &r
		names = append(names, name)
		if err := writePage(*dir, &r, stdout); err != nil {
			return err
		}
	}
	switch len(names) {
	case 0:
		return fmt.Errorf("no chaos-<scenario>.json in %s (scenarios: %s)", *dir, strings.Join(chaos.ScenarioNames(), ", "))
	case 1:
		return nil
	}
	return writeIndex(*dir, names, reports, stdout)
}
