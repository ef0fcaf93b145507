package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// realTools are the commands setup.sh, the Makefile and the stubs below may call. A test
// machine has them all (make test runs make setup first); each case links the ones it
// wants into a directory of its own and uses that as its whole PATH. Not pg_config: the
// PostgreSQL servers a case sees are fakes under its own SETUP_FS_ROOT.
var realTools = []string{
	// What any POSIX system has; bash runs the scripts, make the Makefile.
	"bash", "sh", "env", "uname", "id", "date", "sed", "awk", "grep", "cut", "head", "cat",
	"dirname", "basename", "mkdir", "rm", "make",
	// The chaos set.
	"go", "mvn", "curl", "flock", "setsid", "runuser", "ss", "timeout", "sha256sum",
	"md5sum", "od", "git",
	// The test set.
	"python3", "pgbench", "psql", "promtool", "node", "npm", "chromium",
}

// toolbox is a PATH of one directory: links to the real tools minus the ones left out,
// and stub scripts written into it.
type toolbox struct {
	t   *testing.T
	dir string
}

// newToolbox links every realTools entry except those in without. apt-get and java are
// never linked: each case says which (stub) java it has, and apt-get is what the cases
// play without.
func newToolbox(t *testing.T, without ...string) *toolbox {
	t.Helper()
	tb := &toolbox{t: t, dir: t.TempDir()}
	skip := map[string]bool{}
	for _, name := range without {
		skip[name] = true
	}
	for _, name := range realTools {
		if skip[name] {
			continue
		}
		path, err := exec.LookPath(name)
		if err != nil && name == "runuser" && os.Getuid() != 0 {
			continue // setup.sh wants it only as root
		}
		if err != nil {
			t.Fatalf("%s is not installed on this machine: run make setup first", name)
		}
		if err := os.Symlink(path, filepath.Join(tb.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

// script writes an executable shell script named name into the toolbox.
func (tb *toolbox) script(name, body string) {
	tb.t.Helper()
	writeScript(tb.t, filepath.Join(tb.dir, name), body)
}

// java puts a java that prints version line versionLine, as `java -version` does, to
// stderr.
func (tb *toolbox) java(versionLine string) {
	tb.script("java", fmt.Sprintf("echo '%s' >&2\n", versionLine))
}

// pgConfig puts a pg_config that says the server binaries are in dir.
func (tb *toolbox) pgConfig(dir string) {
	tb.script("pg_config", fmt.Sprintf("[ \"$1\" = --bindir ] && echo '%s'\n", dir))
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeServer lays out the server binaries postgres.sh runs, of the given major, in
// directory dir (under root, the scratch file system root the case plays on).
func fakeServer(t *testing.T, dir string, major int) string {
	t.Helper()
	writeScript(t, filepath.Join(dir, "initdb"),
		fmt.Sprintf("echo 'initdb (PostgreSQL) %d.3 (fake)'\n", major))
	for _, name := range []string{"pg_ctl", "postgres", "pg_isready"} {
		writeScript(t, filepath.Join(dir, name), "exit 1\n")
	}
	return dir
}

// osRoot makes a scratch file system root whose /etc/os-release holds osRelease
// (nothing when it is empty) and returns it, for SETUP_FS_ROOT.
func osRoot(t *testing.T, osRelease string) string {
	t.Helper()
	root := t.TempDir()
	if osRelease != "" {
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte(osRelease), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// machineRoot is osRoot with a PostgreSQL 16 server in Debian's place: the root of a
// machine that has the server, whatever the machine running the test has.
func machineRoot(t *testing.T, osRelease string) string {
	t.Helper()
	root := osRoot(t, osRelease)
	fakeServer(t, filepath.Join(root, "usr", "lib", "postgresql", "16", "bin"), 16)
	return root
}

// run runs argv in dir with the toolbox as the whole PATH and extra environment env
// (KEY=value), and returns its combined output and exit code.
func (tb *toolbox) run(dir string, env []string, argv ...string) (string, int) {
	tb.t.Helper()
	cmd := exec.CommandContext(tb.t.Context(), filepath.Join(tb.dir, argv[0]), argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + tb.dir, "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		exit, ok := err.(*exec.ExitError)
		if !ok {
			tb.t.Fatalf("run %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		code = exit.ExitCode()
	}
	return string(out), code
}

// repoRoot is the repository this package's tests run in (go test runs in scripts/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}
