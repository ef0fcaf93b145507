package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

var portsScriptPath = filepath.Join("..", "scripts", "stack", "ports.sh")

// TestPortsMatchTheScripts: scripts/stack/ports.sh, the scripts' one list of ports, and
// devstack.PortVars, Go's, name the same variables, in the same order, with the same
// defaults; and the scripts check every one of them (STACK_PORT_VARS).
func TestPortsMatchTheScripts(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(portsScriptPath)
	if err != nil {
		t.Fatal(err)
	}
	type portVar struct {
		Name    string
		Default int
	}
	var script []portVar
	assignment := regexp.MustCompile(`(?m)^([A-Z_]+)="\$\{([A-Z_]+):-([0-9]+)\}"$`)
	for _, m := range assignment.FindAllStringSubmatch(string(data), -1) {
		if m[1] != m[2] {
			t.Errorf("ports.sh: %s takes its value from %s", m[1], m[2])
		}
		n, _ := strconv.Atoi(m[3])
		script = append(script, portVar{m[1], n})
	}
	var goVars []portVar
	var names []string
	for _, v := range devstack.PortVars() {
		goVars = append(goVars, portVar{v.Name, v.Default})
		names = append(names, v.Name)
	}
	if diff := cmp.Diff(goVars, script); diff != "" {
		t.Errorf("port variables of devstack.PortVars (-) and scripts/stack/ports.sh (+) differ:\n%s", diff)
	}
	list := regexp.MustCompile(`(?s)STACK_PORT_VARS=\(([^)]*)\)`).FindSubmatch(data)
	if list == nil {
		t.Fatal("ports.sh: no STACK_PORT_VARS=(...) list")
	}
	if diff := cmp.Diff(names, strings.Fields(string(list[1]))); diff != "" {
		t.Errorf("STACK_PORT_VARS (+) is not every variable of devstack.PortVars (-):\n%s", diff)
	}
}

// TestNoPortOutsideItsOnePlace: no default port of the stack is written as a number in
// the scripts, their templates, the Makefile, or the Go code that drives the stack,
// except in the two places that name them (ports.sh and devstack's ports.go) and in
// comments. A number written elsewhere would not move with its variable.
func TestNoPortOutsideItsOnePlace(t *testing.T) {
	t.Parallel()
	var defaults []string
	for _, v := range devstack.PortVars() {
		defaults = append(defaults, strconv.Itoa(v.Default))
	}
	// The cluster's ports are counted from its base: neither they nor the bases of their
	// kinds (base+100 for PROXIED, ...) may be written as numbers.
	base := devstack.DefaultPorts().ClusterBase
	for _, offset := range []int{0, 100, 200, 300} {
		for node := 0; node <= devstack.ClusterNodes; node++ {
			defaults = append(defaults, strconv.Itoa(base+offset+node))
		}
	}
	number := regexp.MustCompile(`\b(` + strings.Join(defaults, "|") + `)\b`)

	var files []string
	for _, pattern := range []string{
		"../Makefile", "../scripts/stack/*.sh", "../scripts/stack/kafka/*.tmpl", "../scripts/stack/kafka/*.properties",
		"../internal/devstack/*.go", "../internal/testenv/*.go", "../internal/chaos/*.go", "../internal/chaos/*/*.go", "../internal/chaos/scenario/*/*.go", "../internal/mutants/*.go",
		"../cmd/chaos/*.go", "../cmd/mutants/*.go", "../cmd/bench/*.go", "../internal/bench/*/*.go",
	} {
		matches, err := filepath.Glob(pattern)
		if err != nil || len(matches) == 0 {
			t.Fatalf("glob %s: %v (no files)", pattern, err)
		}
		files = append(files, matches...)
	}
	for _, path := range files {
		if filepath.Base(path) == "ports.sh" || filepath.Base(path) == "ports.go" || strings.HasSuffix(path, "_test.go") {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "#") || strings.HasPrefix(code, "//") {
				continue
			}
			if m := number.FindString(code); m != "" {
				t.Errorf("%s:%d: port %s written as a number (use its variable: scripts/stack/ports.sh, devstack.Ports):\n\t%s", path, i+1, m, code)
			}
		}
	}
}
