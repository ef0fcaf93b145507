package compose

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// TestComposeTargetFromPublishedPorts is the compose mode's half that only Docker would
// otherwise run: the target read from the file through the ports it publishes. The
// compose stack publishes on the native stack's addresses, so the host's tools, the
// harness among them, use the same ones in both stacks.
func TestComposeTargetFromPublishedPorts(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Load(t.Context(), filepath.Join(root, stack.ComposeFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	view := View{Addr: PublishedAddrs(p)}
	ports := devstack.DefaultPorts()
	got, consumerURL, err := composeTarget(p, view, ports.ToxiproxyAPI())
	if err != nil {
		t.Fatalf("composeTarget: %v", err)
	}
	// The file's own values for what the harness does not share with the native stack:
	// the services' HTTP ports and the databases' credentials and connection options.
	// Its URLs list postgres, then postgres-standby, which a plain `up` does not start:
	// only the primary's published port is left.
	server := "postgres://postgres:postgres@" + ports.PostgresUpstream() + "/?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	paymentsDB, _ := devstack.DatabaseURL(server, "payments")
	antifraudDB, _ := devstack.DatabaseURL(server, "antifraud")
	want := &harness.Target{
		APIURL:     "http://127.0.0.1:" + port(t, p.Services[composeAPI].Environment["HTTP_ADDR"]),
		PaymentsDB: paymentsDB,
		ConsumerDB: antifraudDB,
		Brokers:    []string{ports.DirectBroker()},
		Topic:      event.DefaultTopic,
		Stack:      stack.ComposeKind,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	if got, want := consumerURL, "http://127.0.0.1:"+port(t, p.Services[composeConsumer].Environment["HTTP_ADDR"]); got != want {
		t.Errorf("consumer URL %q, want %q", got, want)
	}
	// The relay's way to Kafka is not published: only the containers use it.
	if addr, err := view.Addr(composeToxiproxy, port(t, p.Services[composeAPI].Environment["KAFKA_BROKERS"])); err == nil {
		t.Errorf("the relay's proxy port resolves to %s on the host, want an error: it is not published", addr)
	}
}

// port is the port of a host:port value of the file.
func port(t *testing.T, value *string) string {
	t.Helper()
	if value == nil {
		t.Fatal("no such variable")
	}
	l, err := listenerMap("X://" + *value)
	if err != nil {
		t.Fatal(err)
	}
	return l["X"].port
}

// TestComposeRunsWhatTheBlackBoxModeRuns: the compose stack runs exactly the scenarios
// the black-box mode (-api-url) runs, and says for each other one, in its own terms, why
// not: a scenario added without a reason here would show the -api-url advice instead.
func TestComposeRunsWhatTheBlackBoxModeRuns(t *testing.T) {
	t.Parallel()
	opts := harness.Options{Target: &harness.Target{}}
	var runs []string
	for _, name := range chaos.ScenarioNames() {
		sc := chaos.Scenarios(false)[name]
		targetErr := harness.TargetRunnable(opts, sc)
		why := composeLimit(opts, sc)
		switch {
		case why == "":
			runs = append(runs, name)
			if targetErr != nil {
				t.Errorf("%s runs on the compose stack, but not against -api-url: %v", name, targetErr)
			}
		case composeLimits[name] == "":
			t.Errorf("%s is not run on the compose stack without a reason of its own (composeLimits); it would say %q", name, why)
		}
	}
	if diff := cmp.Diff([]string{"default", "kafka-down"}, runs); diff != "" {
		t.Errorf("scenarios run on the compose stack (-want +got):\n%s", diff)
	}
}
