package docs

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fuzzTimeout bounds the whole schemathesis run. schemathesis.toml sizes the run to
// about a minute on two cores; the margin is for a loaded machine, not for more cases.
const fuzzTimeout = 5 * time.Minute

// TestOpenAPIFuzz runs schemathesis, a property-based fuzzer, from openapi.yaml against
// the real API: it generates requests the spec allows and requests it forbids, and fails
// on any answer the spec does not promise (schemathesis.toml says which checks run and
// why). Where TestAPIConformsToOpenAPI checks the answers we thought of, this one looks
// for the ones we did not.
//
// schemathesis is a Python program that `go test` cannot install, so the test runs only
// when SCHEMATHESIS names its executable: `make check-openapi` (scripts/check-openapi.sh)
// installs the pinned version and sets it, and `make test` runs that target.
func TestOpenAPIFuzz(t *testing.T) {
	schemathesis := os.Getenv("SCHEMATHESIS")
	if schemathesis == "" {
		t.Skip("SCHEMATHESIS is not set: run make check-openapi, which installs schemathesis and runs this test")
	}
	t.Parallel()
	base, admin, _, apiKey := startAPI(t)

	ctx, cancel := context.WithTimeout(context.Background(), fuzzTimeout)
	defer cancel()
	// Two runs: the public API at base, the operations tagged admin (/metrics, /admin/)
	// at the admin listener, where the API serves them.
	for _, target := range [][]string{{"--exclude-tag", "admin", "--url", base}, {"--include-tag", "admin", "--url", admin}} {
		fuzz(ctx, t, schemathesis, apiKey, target)
	}
}

// fuzz runs schemathesis on openapi.yaml with the flags of target.
func fuzz(ctx context.Context, t *testing.T, schemathesis, apiKey string, target []string) {
	t.Helper()
	args := append([]string{"--config-file", "schemathesis.toml", "run", "openapi.yaml"}, target...)
	// SCHEMATHESIS_FLAGS adds flags of `schemathesis run`, e.g. "--seed 1234" to replay
	// the run a failure printed, or "--report har" to see every request.
	args = append(args, strings.Fields(os.Getenv("SCHEMATHESIS_FLAGS"))...)
	cmd := exec.CommandContext(ctx, schemathesis, args...)
	cmd.Env = append(os.Environ(),
		// schemathesis.toml reads the bearer token of the admin endpoints from here.
		"SCHEMATHESIS_ADMIN_TOKEN="+adminToken,
		// ... and the merchant's API key of the payment endpoints.
		"SCHEMATHESIS_API_KEY="+apiKey,
		// Hypothesis, the generator under schemathesis, keeps caches in its working
		// directory otherwise, which is docs/.
		"HYPOTHESIS_STORAGE_DIRECTORY="+t.TempDir(),
	)
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("schemathesis did not finish within %s", fuzzTimeout)
		}
		t.Fatalf("schemathesis found answers that openapi.yaml does not promise (report above): %v", err)
	}
}
