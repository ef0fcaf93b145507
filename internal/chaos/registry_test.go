package chaos

import (
	"testing"
)

// Every scenario of the registry has a name of its own, in both sizes: Scenarios keys
// them by name, so a second scenario under a name would silently replace the first.
func TestRegistryNamesEachScenarioOnce(t *testing.T) {
	t.Parallel()
	for _, short := range []bool{false, true} {
		seen := map[string]bool{}
		for _, sc := range registry(short) {
			if sc.Name == "" || seen[sc.Name] {
				t.Errorf("short %t: scenario %q is empty or listed twice", short, sc.Name)
			}
			seen[sc.Name] = true
			if sc.Disrupt == nil || sc.Validity == nil {
				t.Errorf("short %t: scenario %q has no Disrupt or no Validity", short, sc.Name)
			}
		}
		if got := len(Scenarios(short)); got != len(ScenarioNames()) {
			t.Errorf("short %t: %d scenarios by name, %d names", short, got, len(ScenarioNames()))
		}
	}
}
