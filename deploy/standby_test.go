package deploy

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// TestComposeStandbyMatchesNative: the compose standby is the native one of
// PG_NODES=2 postgres.sh: a profile of its own, so that a plain `up` runs without it;
// the primary's server options; the native standby's host port; and no service that
// waits for it, while the services' DATABASE_URL lists it after the primary with
// target_session_attrs=read-write, as the native multi-host URL does.
func TestComposeStandbyMatchesNative(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	standby := service(t, p, "postgres-standby")
	if !slices.Equal(standby.Profiles, []string{"standby"}) {
		t.Errorf("postgres-standby profiles = %q, want [standby]: a plain `up` must not need it", standby.Profiles)
	}
	if diff := cmp.Diff(nativeServerOptions(t), serverOptions(standby.Command)); diff != "" {
		t.Errorf("postgres-standby options differ from postgres.sh SERVER_OPTIONS (-native +compose):\n%s", diff)
	}
	port := strconv.Itoa(devstack.DefaultPorts().PostgresStandby)
	if !slices.ContainsFunc(standby.Ports, func(pc types.ServicePortConfig) bool { return pc.Published == port && pc.HostIP == "127.0.0.1" }) {
		t.Errorf("postgres-standby does not publish 127.0.0.1:%s (PGSTACK_STANDBY_PORT's default)", port)
	}
	for name, s := range p.Services {
		if _, ok := s.DependsOn["postgres-standby"]; ok {
			t.Errorf("%s depends on postgres-standby: compose must run without it", name)
		}
	}

	native, err := url.Parse(devstack.DefaultPorts().FollowingURL("payments"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api", "api-2", "consumer"} {
		u, err := url.Parse(env(t, service(t, p, name), "DATABASE_URL"))
		if err != nil {
			t.Fatalf("%s DATABASE_URL: %v", name, err)
		}
		if got, want := u.Host, "postgres:5432,postgres-standby:5432"; got != want {
			t.Errorf("%s DATABASE_URL hosts = %q, want %q (the primary, then the standby)", name, got, want)
		}
		for _, param := range []string{"target_session_attrs", "connect_timeout"} {
			if got, want := u.Query().Get(param), native.Query().Get(param); got != want {
				t.Errorf("%s DATABASE_URL %s = %q, want %q as in the native multi-host URL", name, param, got, want)
			}
		}
	}
}

// TestStandbyURLIsDevstacks: `PG_NODES=2 postgres.sh url` prints the URL that
// devstack.Ports.FollowingURL builds, for the ports of the environment.
func TestStandbyURLIsDevstacks(t *testing.T) {
	t.Parallel()
	env := []string{"PG_NODES=2", "PGSTACK_PORT=55532", "PGSTACK_STANDBY_PORT=55533"}
	cmd := exec.Command("bash", "../scripts/stack/postgres.sh", "url")
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("postgres.sh url: %v\n%s", err, out)
	}
	ports, err := devstack.LoadPorts(func(name string) string {
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v
			}
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), ports.FollowingURL("postgres"); got != want {
		t.Errorf("PG_NODES=2 postgres.sh url = %q, want devstack's %q", got, want)
	}
}

// TestComposeStandbyIsNamed: the compose entrypoint names its standby as the native
// script does (TestStandbyPromoteAndRebuild runs that one): pg_basebackup connects as
// application_name standby, which -R keeps in primary_conninfo, and the primary's
// synchronous_standby_names is that name, never '*', which the CDC relay's logical
// walsender would match too.
func TestComposeStandbyIsNamed(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("postgres", "standby.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(data)
	for _, want := range []string{
		`pg_basebackup -h postgres -U postgres -d application_name=standby `,
		`ALTER SYSTEM SET synchronous_standby_names = '\"standby\"'`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("deploy/postgres/standby.sh has no %s", want)
		}
	}
	if strings.Contains(script, `synchronous_standby_names = '*'`) {
		t.Error("deploy/postgres/standby.sh sets synchronous_standby_names = '*': any walsender would do")
	}
}
