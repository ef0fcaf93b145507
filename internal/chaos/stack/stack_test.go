package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChooseStackIsNativeWhereDockerRuns: most students have Docker running, and a
// verdict that depended on that would change under them. With a docker on PATH whose
// `docker info` succeeds, the stack is still native unless STACK=compose.
func TestChooseStackIsNativeWhereDockerRuns(t *testing.T) {
	// Not parallel: PATH is the process's.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Fatalf("the stub docker info: %v", err)
	}
	tests := []struct {
		env, want, reason, wantErr string
	}{
		{env: "", want: NativeKind, reason: "the default; STACK=compose"},
		{env: "native", want: NativeKind, reason: "STACK=native"},
		{env: "compose", want: ComposeKind, reason: "STACK=compose"},
		{env: "docker", wantErr: `STACK="docker": want native (the default) or compose`},
	}
	for _, tt := range tests {
		got, reason, err := Choose(func(name string) string {
			if name == "STACK" {
				return tt.env
			}
			return ""
		})
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("STACK=%q: got error %v, want %q", tt.env, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want || !strings.HasPrefix(reason, tt.reason) {
			t.Errorf("STACK=%q: got %q (%s), %v; want %q (%s...)", tt.env, got, reason, err, tt.want, tt.reason)
		}
	}
}
