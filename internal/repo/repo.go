// Package repo finds this repository's files at run time, for the programs and tests
// that drive the native stack (scripts/stack) from any working directory inside it.
package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Root returns the repository root: the first directory holding go.mod, walking up from
// the working directory (a package under test, or wherever `go run` was started).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("find repo root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}
