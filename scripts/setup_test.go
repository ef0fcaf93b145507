package scripts

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMakeChaosStopsBeforeStartingAnything plays a Fedora machine (no apt-get) that lacks
// flock and has only Java 11, and runs make chaos in a scratch copy of the Makefile and
// scripts: it must name both, print the dnf command that installs them, exit non-zero,
// and start nothing: no recipe after the set-up runs, no .stack/ state is created, and
// PostgreSQL's port (moved to a free one of this test's) stays closed.
func TestMakeChaosStopsBeforeStartingAnything(t *testing.T) {
	t.Parallel()
	repo := repoRoot(t)
	scratch := t.TempDir()
	if err := os.CopyFS(filepath.Join(scratch, "scripts"), os.DirFS(filepath.Join(repo, "scripts"))); err != nil {
		t.Fatalf("copy scripts: %v", err)
	}
	for _, file := range []string{"Makefile", "go.mod"} {
		data, err := os.ReadFile(filepath.Join(repo, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)

	tb := newToolbox(t, "flock")
	tb.java(`openjdk version "11.0.22" 2024-01-16`)
	out, code := tb.run(scratch, []string{
		"SETUP_FS_ROOT=" + machineRoot(t, "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=41\n"),
		"PGSTACK_PORT=" + strconv.Itoa(port),
	}, "make", "chaos")

	if code == 0 {
		t.Errorf("make chaos exited 0; want non-zero. Output:\n%s", out)
	}
	for _, want := range []string{
		"setup: missing on this machine (Fedora or RHEL):\n",
		"  - Java 17 or newer (Kafka 4; found Java 11 at ",
		"  - flock\n",
		"  sudo dnf install -y java-21-openjdk-headless util-linux\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make chaos output:\n%s\nwant it to contain %q", out, want)
		}
	}
	if strings.Contains(out, "cmd/chaos") {
		t.Errorf("make chaos went past the set-up (it ran cmd/chaos):\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(scratch, ".stack")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("make chaos left %s/.stack (stat: %v): something was started", scratch, err)
	}
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		conn.Close()
		t.Errorf("something listens on 127.0.0.1:%d, the PGSTACK_PORT make chaos was given", port)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial 127.0.0.1:%d: %v; want connection refused", port, err)
	}
}

// TestAptGetOnlyForWhatIsMissing gives setup.sh an apt-get, a sudo and an id that says
// "not root", all stubs that log their calls. With nothing missing, neither apt-get nor
// sudo runs. With flock missing, apt-get update and one apt-get install of util-linux run
// through sudo, and setup.sh, finding flock still missing (the stubs install nothing),
// says so and fails. With Go missing too, which no Debian package provides in a version
// recent enough, nothing is installed: one message names both, and how to get Go.
func TestAptGetOnlyForWhatIsMissing(t *testing.T) {
	t.Parallel()
	realID, err := exec.LookPath("id")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		without   []string
		wantCalls []string // of apt-get and sudo
		wantOut   string   // "": exit 0 and silent; else a non-zero exit and this in the output
	}{
		{name: "nothing missing"},
		{name: "flock missing", without: []string{"flock"}, wantCalls: []string{
			"sudo apt-get update -qq",
			"apt-get update -qq",
			"sudo apt-get install -y -qq --no-install-recommends util-linux",
			"apt-get install -y -qq --no-install-recommends util-linux",
		}, wantOut: "setup: still missing after apt-get install:\n  - flock\n"},
		{name: "go and flock missing", without: []string{"flock", "go"},
			wantOut: "  - flock\nInstall them with:\n" +
				"  sudo apt-get install -y --no-install-recommends util-linux\n" +
				"  Go: https://go.dev/dl"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := newToolbox(t, append([]string{"id"}, tt.without...)...)
			tb.java(`openjdk version "21.0.5" 2024-10-15`)
			calls := filepath.Join(t.TempDir(), "calls")
			tb.script("apt-get", `echo "apt-get $*" >>`+calls+"\n")
			tb.script("sudo", `echo "sudo $*" >>`+calls+"\nexec \"$@\"\n")
			tb.script("id", `[ "$1" = -u ] && { echo 1000; exit; }; exec `+realID+" \"$@\"\n")
			out, code := tb.run(repoRoot(t), []string{"SETUP_FS_ROOT=" + machineRoot(t, "ID=debian\n")},
				"bash", "scripts/setup.sh", "chaos")
			logged, err := os.ReadFile(calls)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			var got []string
			if len(logged) > 0 {
				got = strings.Split(strings.TrimSuffix(string(logged), "\n"), "\n")
			}
			if diff := cmp.Diff(tt.wantCalls, got); diff != "" {
				t.Errorf("calls of apt-get and sudo (-want +got):\n%s\nsetup.sh said:\n%s", diff, out)
			}
			if tt.wantOut == "" {
				if code != 0 || out != "" {
					t.Errorf("setup.sh chaos: exit %d, output:\n%s\nwant exit 0, silent", code, out)
				}
				return
			}
			if code == 0 || !strings.Contains(out, tt.wantOut) {
				t.Errorf("setup.sh chaos: exit %d, output:\n%s\nwant a non-zero exit and %q", code, out, tt.wantOut)
			}
		})
	}
}

// freePort returns a loopback port that nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
