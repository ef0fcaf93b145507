package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/google/go-cmp/cmp"
)

// samplePath is the curated run that the repository keeps for readers who have not run
// anything (make chaos-sample writes it, with its page and the README's pictures).
var samplePath = filepath.Join("..", "..", "docs", "sample", "chaos-default.json")

// The sample's verdict rows are the ones the harness writes today: the same kinds and
// names, in the same order, as the checks built again from the sample's own figures.
// A row renamed, added or removed without make chaos-sample fails here.
func TestSampleRowsMatchTheHarness(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatalf("read the sample: %v (make chaos-sample writes it)", err)
	}
	var sample verdict.Report
	if err := json.Unmarshal(b, &sample); err != nil {
		t.Fatalf("decode the sample: %v", err)
	}
	sc, ok := Scenarios(false)[sample.Scenario]
	if !ok || sample.Scenario != "default" {
		t.Fatalf("the sample is a run of %q, want the default scenario", sample.Scenario)
	}
	type row struct {
		Kind verdict.CheckKind
		Name string
	}
	rows := func(checks []verdict.Check) []row {
		out := make([]row, len(checks))
		for i, c := range checks {
			out[i] = row{c.Kind, c.Name}
		}
		return out
	}
	recorded := rows(sample.Checks)
	current := rows(sc.Checks(&sample, nil))
	if diff := cmp.Diff(current, recorded); diff != "" {
		t.Errorf("the sample's verdict rows differ from the harness's: run make chaos-sample (-harness +sample):\n%s", diff)
	}
}
