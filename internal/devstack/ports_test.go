package devstack

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadPorts(t *testing.T) {
	t.Parallel()
	moved := DefaultPorts()
	moved.Postgres, moved.KafkaProxy, moved.ClusterBase = 55532, 29192, 21290
	tests := []struct {
		name    string
		env     map[string]string
		want    Ports
		wantErr string // a part of the error; empty for none
	}{
		{name: "defaults", env: nil, want: DefaultPorts()},
		{name: "moved", env: map[string]string{"PGSTACK_PORT": "55532", "KAFKASTACK_PROXY_PORT": "29192", "KAFKASTACK_CLUSTER_PORT": "21290"}, want: moved},
		{name: "not a number", env: map[string]string{"TOXISTACK_API_PORT": "84x4"}, wantErr: "TOXISTACK_API_PORT"},
		{name: "out of range", env: map[string]string{"KAFKASTACK_DIRECT_PORT": "70000"}, wantErr: "KAFKASTACK_DIRECT_PORT"},
		{name: "no room for the cluster", env: map[string]string{"KAFKASTACK_CLUSTER_PORT": "65500"}, wantErr: "KAFKASTACK_CLUSTER_PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadPorts(func(name string) string { return tt.env[name] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadPorts: got err %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadPorts: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ports mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPortsAddresses: the addresses follow the ports, and Environ hands every port to
// the scripts under its variable.
func TestPortsAddresses(t *testing.T) {
	t.Parallel()
	p, err := LoadPorts(func(name string) string {
		return map[string]string{"PGSTACK_PORT": "55532", "KAFKASTACK_DIRECT_PORT": "19192", "KAFKASTACK_CLUSTER_PORT": "21290"}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"AdminURL": p.AdminURL(), "DirectBroker": p.DirectBroker(), "ProxiedBroker": p.ProxiedBroker(), "SASLSSLBroker": p.SASLSSLBroker(),
		"ToxiproxyAPI": p.ToxiproxyAPI(), "ProxiedPostgres": p.ProxiedPostgres(),
		"ClusterBrokers": strings.Join(p.ClusterBrokers(), ","), "ClusterProxiedBrokers": strings.Join(p.ClusterProxiedBrokers(), ","),
		"PostgresStandbyUpstream": p.PostgresStandbyUpstream(), "FollowingURL": p.FollowingURL("payments"),
	}
	want := map[string]string{
		"AdminURL":     "postgres://postgres@127.0.0.1:55532/postgres?sslmode=disable",
		"DirectBroker": "127.0.0.1:19192", "ProxiedBroker": "127.0.0.1:29092", "SASLSSLBroker": "127.0.0.1:19095",
		"ToxiproxyAPI": "127.0.0.1:8474", "ProxiedPostgres": "127.0.0.1:25432",
		"ClusterBrokers":          "127.0.0.1:21291,127.0.0.1:21292,127.0.0.1:21293",
		"ClusterProxiedBrokers":   "127.0.0.1:21491,127.0.0.1:21492,127.0.0.1:21493",
		"PostgresStandbyUpstream": "127.0.0.1:55433",
		"FollowingURL":            "postgres://postgres@127.0.0.1:55532,127.0.0.1:55433/payments?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("addresses mismatch (-want +got):\n%s", diff)
	}
	env := p.Environ()
	for _, kv := range []string{"PGSTACK_PORT=55532", "KAFKASTACK_DIRECT_PORT=19192", "KAFKASTACK_PROXY_PORT=29092", "KAFKASTACK_CLUSTER_PORT=21290"} {
		if !slices.Contains(env, kv) {
			t.Errorf("Environ() = %q, want it to hold %s", env, kv)
		}
	}
	if len(env) != len(PortVars()) {
		t.Errorf("Environ() has %d entries, want one per variable (%d)", len(env), len(PortVars()))
	}
}
