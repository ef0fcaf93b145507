package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The consumer shares only the event contract with the API (package event). Linking the
// API's packages would make the consumer rebuild and redeploy with every change to the
// HTTP handlers or the relay, and would let it call them by mistake.
func TestConsumerLinksNoneOfTheAPI(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		"github.com/go-chi/", // the API's router
		"github.com/dscourse/payments-outbox/internal/payment",
		"github.com/dscourse/payments-outbox/internal/outbox",
		"github.com/dscourse/payments-outbox/internal/dualwrite",
	}
	// go test puts the go binary that runs it first in PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go tool: %v", err)
	}
	// The non-test dependencies of this package, the binary as built: one import path a
	// line, standard library included.
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderrOf(err))
	}
	deps := strings.Fields(string(out))
	// A listing without the contract would be of something else, and prove nothing.
	if contract := "github.com/dscourse/payments-outbox/internal/event"; !slices.Contains(deps, contract) {
		t.Fatalf("go list -deps . does not list %s; it listed:\n%s", contract, out)
	}
	for _, dep := range deps {
		for _, prefix := range forbidden {
			if strings.HasPrefix(dep, prefix) {
				t.Errorf("cmd/consumer links %s; the consumer must share only internal/event with the API", dep)
			}
		}
	}
}

// stderrOf returns what a failed command wrote to stderr, if it was captured.
func stderrOf(err error) string {
	if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
		return string(exitErr.Stderr)
	}
	return ""
}
