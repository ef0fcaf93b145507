package compose

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// TestValueMultiHost: each host of a multi-host URL, and each address of a list, is
// mapped in its order; one of a service that no chosen profile starts is dropped, as
// its name does not resolve in the compose network; one of no service is kept.
func TestValueMultiHost(t *testing.T) {
	t.Parallel()
	services := func(names ...string) types.Services {
		s := types.Services{}
		for _, n := range names {
			s[n] = types.ServiceConfig{Name: n}
		}
		return s
	}
	primaryOnly := &types.Project{
		Services:         services("api", "postgres", "kafka-1"),
		DisabledServices: services("postgres-standby", "kafka-2"),
	}
	withStandby := &types.Project{Services: services("api", "postgres", "postgres-standby")}
	view := View{
		Addr: func(service, port string) (string, error) {
			addr, ok := map[string]string{
				"postgres:5432":         "127.0.0.1:55432",
				"postgres-standby:5432": "127.0.0.1:55433",
				"kafka-1:21191":         "127.0.0.1:21191",
			}[service+":"+port]
			if !ok {
				return "", fmt.Errorf("%s:%s is not published", service, port)
			}
			return addr, nil
		},
		Databases: map[string]string{"payments": "run1_payments"},
	}
	tests := []struct {
		name    string
		project *types.Project
		value   string
		want    string
		wantErr bool
	}{
		{
			name:    "standby not started: dropped",
			project: primaryOnly,
			value:   "postgres://u:p@postgres:5432,postgres-standby:5432/payments?target_session_attrs=read-write",
			want:    "postgres://u:p@127.0.0.1:55432/run1_payments?target_session_attrs=read-write",
		},
		{
			name:    "standby started: both, in order",
			project: withStandby,
			value:   "postgres://u:p@postgres:5432,postgres-standby:5432/payments?target_session_attrs=read-write",
			want:    "postgres://u:p@127.0.0.1:55432,127.0.0.1:55433/run1_payments?target_session_attrs=read-write",
		},
		{
			name:    "the hosts' order is kept",
			project: withStandby,
			value:   "postgres://u:p@postgres-standby:5432,postgres:5432/payments",
			want:    "postgres://u:p@127.0.0.1:55433,127.0.0.1:55432/run1_payments",
		},
		{
			name:    "a host of no service is kept",
			project: primaryOnly,
			value:   "postgres://u:p@db.example.com:5432,postgres:5432/other",
			want:    "postgres://u:p@db.example.com:5432,127.0.0.1:55432/other",
		},
		{
			name:    "only a service not started: nothing would run",
			project: primaryOnly,
			value:   "postgres://u:p@postgres-standby:5432/payments",
			wantErr: true,
		},
		{
			name:    "a seed list drops a broker not started",
			project: primaryOnly,
			value:   "kafka-1:21191,kafka-2:21192",
			want:    "127.0.0.1:21191",
		},
		{
			name:    "a started host the view cannot place is an error",
			project: withStandby,
			value:   "postgres://u:p@postgres:5432,postgres-standby:5433/payments",
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := view.Value(tt.project, "api", tt.value)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Value(%q) = %q, want an error", tt.value, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Value(%q): %v", tt.value, err)
			}
			if got != tt.want {
				t.Errorf("Value(%q) = %q, want %q", tt.value, got, tt.want)
			}
		})
	}
}

// TestComposeTargetWithStandby: with the standby's profile, the harness's URLs list the
// primary, then the standby, in the file's order, at the addresses the file publishes
// them on: the native stack's, as for every other service.
func TestComposeTargetWithStandby(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, stack.ComposeFile)
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithProfiles([]string{"standby"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cli.ProjectFromOptions(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ports := devstack.DefaultPorts()
	got, _, err := composeTarget(p, View{Addr: PublishedAddrs(p)}, ports.ToxiproxyAPI())
	if err != nil {
		t.Fatalf("composeTarget: %v", err)
	}
	want := "postgres://postgres:postgres@" + ports.PostgresUpstream() + "," + ports.PostgresStandbyUpstream() + "/payments?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	if got.PaymentsDB != want {
		t.Errorf("payments database %q, want %q", got.PaymentsDB, want)
	}
}
