// Package benchreport keeps reports/bench.json: one JSON object that every benchmark
// of `make bench` adds its figures to.
package benchreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Merge sets fields in the JSON object stored at path, keeping the fields that other
// benchmarks wrote, and creates the file if it does not exist.
func Merge(path string, fields map[string]any) error {
	report := map[string]any{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", path, err)
	default:
		if err := json.Unmarshal(b, &report); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
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
