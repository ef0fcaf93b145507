// Package benchreport keeps the benchmark's figures: one JSON object that every
// benchmark of cmd/bench adds its figures to, in Path, and the copy that the
// documentation cites, in Published, which a run's figures reach only by Promote.
package benchreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	// Path is where a run writes its figures: a generated file, not tracked, so that a
	// run on a busy laptop never changes the figures the documentation quotes.
	Path = "reports/bench.json"
	// Published is the figures docs/bench.md cites, each family with its measured_at.
	Published = "docs/bench.json"
)

// Merge sets fields in the JSON object stored at path, keeping the fields that other
// benchmarks wrote, and creates the file if it does not exist.
func Merge(path string, fields map[string]any) error {
	report, err := read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		report = map[string]any{}
	case err != nil:
		return err
	}
	for k, v := range fields {
		report[k] = v
	}
	out, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// Promote merges every field of the run's report at from into the published figures at
// to: the figures the run measured replace the published ones, and the figures it did
// not measure (another benchmark's, as the scale curve's) are kept with their own
// measured_at.
func Promote(from, to string) error {
	run, err := read(from)
	if err != nil {
		return err
	}
	if len(run) == 0 {
		return fmt.Errorf("%s holds no figures", from)
	}
	return Merge(to, run)
}

// read returns the JSON object stored at path.
func read(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	report := map[string]any{}
	if err := json.Unmarshal(b, &report); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return report, nil
}
