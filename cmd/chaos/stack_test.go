package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunSaysWhichStackFirst: make chaos runs this command; where a Docker engine
// answers (a stub docker on PATH), its first line still says the native stack, and why.
// The context is cancelled, so the run ends at its first step that waits (the lock or
// the native stack's scripts) and starts nothing.
func TestRunSaysWhichStackFirst(t *testing.T) {
	// Not parallel: PATH is the process's.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Fatalf("the stub docker info: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		stack     string
		args      []string
		firstLine string
		wantErr   string
	}{
		{stack: "", args: []string{"-scenario", "default"}, firstLine: "stack: native (the default; STACK=compose runs the services of deploy/docker-compose.yml in Docker instead)"},
		{stack: "compose", args: []string{"-api-url", "http://127.0.0.1:9"}, firstLine: "stack: compose (STACK=compose)", wantErr: "-api-url cannot go with STACK=compose"},
	}
	for _, tt := range tests {
		var out strings.Builder
		err := run(ctx, tt.args, func(name string) string {
			if name == "STACK" {
				return tt.stack
			}
			return ""
		}, &out)
		t.Logf("STACK=%q %v: %v", tt.stack, tt.args, err)
		if err == nil {
			t.Errorf("STACK=%q %v: no error with a cancelled context", tt.stack, tt.args)
		} else if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("STACK=%q %v: got error %v, want %q", tt.stack, tt.args, err, tt.wantErr)
		}
		if first, _, _ := strings.Cut(out.String(), "\n"); first != tt.firstLine {
			t.Errorf("STACK=%q: first line %q, want %q", tt.stack, first, tt.firstLine)
		}
	}
}
