package scripts

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostgreSQLSearch lays out fake servers of several majors in a scratch file system
// root and asks scripts/stack/pgbin.sh which one it would use: majors 14 to 17 only,
// PG_BIN first and alone, then pg_config, then the newest of the usual places.
func TestPostgreSQLSearch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// servers maps a path under the scratch root to the major laid out there.
		servers   map[string]int
		pgBin     string // under the root; "" leaves PG_BIN unset
		pgConfig  string // under the root; "" means no pg_config on PATH
		wantBin   string // under the root; "" means none accepted
		wantInMsg string // in PG_REFUSED when none is accepted
	}{
		{name: "13 refused", servers: map[string]int{"/usr/lib/postgresql/13/bin": 13},
			wantInMsg: "13 at "},
		{name: "18 refused", servers: map[string]int{"/usr/lib/postgresql/18/bin": 18},
			wantInMsg: "18 at "},
		{name: "14 accepted", servers: map[string]int{"/usr/lib/postgresql/14/bin": 14},
			wantBin: "/usr/lib/postgresql/14/bin"},
		{name: "17 accepted (PGDG RPM)", servers: map[string]int{"/usr/pgsql-17/bin": 17},
			wantBin: "/usr/pgsql-17/bin"},
		{name: "Homebrew on Apple silicon", servers: map[string]int{"/opt/homebrew/opt/postgresql@16/bin": 16},
			wantBin: "/opt/homebrew/opt/postgresql@16/bin"},
		{name: "Homebrew on Intel", servers: map[string]int{"/usr/local/opt/postgresql@15/bin": 15},
			wantBin: "/usr/local/opt/postgresql@15/bin"},
		{name: "the newest in range wins", servers: map[string]int{
			"/usr/lib/postgresql/13/bin": 13, "/usr/lib/postgresql/15/bin": 15,
			"/usr/lib/postgresql/16/bin": 16, "/usr/lib/postgresql/18/bin": 18},
			wantBin: "/usr/lib/postgresql/16/bin"},
		{name: "pg_config before the usual places", servers: map[string]int{
			"/usr/lib/postgresql/15/bin": 15, "/usr/lib/postgresql/17/bin": 17},
			pgConfig: "/usr/lib/postgresql/15/bin", wantBin: "/usr/lib/postgresql/15/bin"},
		{name: "pg_config of 18 passed over", servers: map[string]int{
			"/usr/lib/postgresql/14/bin": 14, "/usr/lib/postgresql/18/bin": 18},
			pgConfig: "/usr/lib/postgresql/18/bin", wantBin: "/usr/lib/postgresql/14/bin"},
		{name: "PG_BIN alone decides", servers: map[string]int{
			"/opt/pg13/bin": 13, "/usr/lib/postgresql/16/bin": 16},
			pgBin: "/opt/pg13/bin", wantInMsg: "13 at "},
		{name: "PG_BIN accepted", servers: map[string]int{
			"/opt/pg14/bin": 14, "/usr/lib/postgresql/16/bin": 16},
			pgBin: "/opt/pg14/bin", wantBin: "/opt/pg14/bin"},
	}
	lib := filepath.Join(repoRoot(t), "scripts", "stack", "pgbin.sh")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := osRoot(t, "")
			for dir, major := range tt.servers {
				fakeServer(t, filepath.Join(root, dir), major)
			}
			tb := newToolbox(t)
			if tt.pgConfig != "" {
				tb.pgConfig(root + tt.pgConfig)
			}
			env := []string{"SETUP_FS_ROOT=" + root}
			if tt.pgBin != "" {
				env = append(env, "PG_BIN="+root+tt.pgBin)
			}
			out, code := tb.run(root, env, "bash", "-c",
				`source "$1"; if pg_find; then echo "found $PG_FOUND_BIN"; else echo "refused: $PG_REFUSED"; exit 1; fi`, "pgbin", lib)
			if tt.wantBin != "" {
				if want := "found " + root + tt.wantBin + "\n"; code != 0 || out != want {
					t.Errorf("pg_find: exit %d, output %q; want %q", code, out, want)
				}
				return
			}
			if code == 0 || !strings.Contains(out, tt.wantInMsg) {
				t.Errorf("pg_find: exit %d, output %q; want a refusal naming %q", code, out, tt.wantInMsg)
			}
		})
	}
}

// TestPostgresScriptRefusesWhatSetupRefuses checks that scripts/stack/postgres.sh finds
// its server through the same search: given only a PostgreSQL 13, it stops before
// touching any server and says why.
func TestPostgresScriptRefusesWhatSetupRefuses(t *testing.T) {
	t.Parallel()
	root := osRoot(t, "")
	bin := fakeServer(t, filepath.Join(root, "pg13", "bin"), 13)
	tb := newToolbox(t)
	out, code := tb.run(root, []string{"PG_BIN=" + bin}, "bash",
		filepath.Join(repoRoot(t), "scripts", "stack", "postgres.sh"), "status")
	if code == 0 || !strings.Contains(out, "refused: 13 at "+bin) {
		t.Errorf("postgres.sh status with PG_BIN=%s: exit %d, output:\n%s\nwant a refusal of 13", bin, code, out)
	}
}

// TestJavaVersion runs setup.sh's chaos checks with a java of each version on an
// otherwise complete machine: 17 and newer pass, older ones and macOS's placeholder
// /usr/bin/java (no JDK installed) are named as missing.
func TestJavaVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, versionLine string
		exit              int // of the java stub itself
		accepted          bool
		found             string // what the message says was found
	}{
		{name: "11", versionLine: `openjdk version "11.0.22" 2024-01-16`, found: "found Java 11"},
		{name: "8", versionLine: `java version "1.8.0_392"`, found: "found Java 8"},
		{name: "17", versionLine: `openjdk version "17.0.15" 2025-04-15`, accepted: true},
		{name: "21", versionLine: `openjdk version "21" 2023-09-19`, accepted: true},
		{name: "25", versionLine: `openjdk version "25.0.1" 2025-10-21 LTS`, accepted: true},
		{name: "macOS placeholder", versionLine: "The operation couldn’t be completed. Unable to locate a Java Runtime.", exit: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := newToolbox(t)
			tb.script("java", fmt.Sprintf("echo '%s' >&2\nexit %d\n", tt.versionLine, tt.exit))
			out, code := tb.run(repoRoot(t), []string{"SETUP_FS_ROOT=" + machineRoot(t, "ID=fedora\n")},
				"bash", "scripts/setup.sh", "chaos")
			if tt.accepted {
				if code != 0 || out != "" {
					t.Errorf("setup.sh chaos with Java %s: exit %d, output:\n%s\nwant exit 0, silent", tt.name, code, out)
				}
				return
			}
			if code == 0 || !strings.Contains(out, "Java 17 or newer") || !strings.Contains(out, tt.found) ||
				!strings.Contains(out, "sudo dnf install -y java-21-openjdk-headless") {
				t.Errorf("setup.sh chaos with Java %s: exit %d, output:\n%s\nwant Java 17 named missing (%q) with dnf's command", tt.name, code, out, tt.found)
			}
		})
	}
}

// TestInstallCommandPerSystem leaves flock out on a machine without apt-get and checks
// the one command setup.sh prints for each system it recognises (uname and os-release's
// ID, then ID_LIKE), and the generic line for the others.
func TestInstallCommandPerSystem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, uname, osRelease string
		want                   []string
	}{
		{name: "fedora", uname: "Linux", osRelease: "ID=fedora\nVERSION_ID=41\n",
			want: []string{"(Fedora or RHEL)", "  sudo dnf install -y util-linux\n"}},
		{name: "rocky through ID_LIKE", uname: "Linux", osRelease: "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n",
			want: []string{"  sudo dnf install -y util-linux\n"}},
		{name: "arch", uname: "Linux", osRelease: "ID=arch\n",
			want: []string{"(Arch Linux)", "  sudo pacman -S --needed util-linux\n"}},
		{name: "manjaro through ID_LIKE", uname: "Linux", osRelease: "ID=manjaro\nID_LIKE=arch\n",
			want: []string{"  sudo pacman -S --needed util-linux\n"}},
		{name: "macos", uname: "Darwin",
			want: []string{"(macOS)", "  brew install util-linux\n", `export PATH="$(brew --prefix util-linux)/bin:$PATH"`}},
		{name: "ubuntu without apt-get on PATH", uname: "Linux", osRelease: "ID=ubuntu\nID_LIKE=debian\n",
			want: []string{"  sudo apt-get install -y --no-install-recommends util-linux\n"}},
		{name: "other", uname: "Linux", osRelease: "ID=alpine\n",
			want: []string{"no known package manager", "  your package manager: util-linux (the usual package names)\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := newToolbox(t, "flock")
			tb.java(`openjdk version "17.0.15" 2025-04-15`)
			out, code := tb.run(repoRoot(t), []string{"SETUP_UNAME=" + tt.uname, "SETUP_FS_ROOT=" + machineRoot(t, tt.osRelease)},
				"bash", "scripts/setup.sh", "chaos")
			if code == 0 || !strings.Contains(out, "  - flock\n") {
				t.Fatalf("setup.sh chaos without flock: exit %d, output:\n%s\nwant flock named missing", code, out)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("setup.sh chaos output:\n%s\nwant it to contain %q", out, want)
				}
			}
		})
	}
}
