package faults

import (
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The probe reports what an in-process Toxiproxy in front of the real broker does to
// it, for each fault the harness applies. One proxy, faults in turn: they must not
// overlap.
func TestProbeProxySeesEachFault(t *testing.T) {
	t.Parallel()
	kp := testenv.NewKafkaProxy(t)
	if got := probeProxy(t.Context(), kp.Addr); got != ProbeAnswered {
		t.Fatalf("clean proxy: got %q, want %q", got, ProbeAnswered)
	}
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := kp.Proxy.AddToxic("hold", "timeout", stream, 1, toxiproxy.Attributes{"timeout": 0}); err != nil {
			t.Fatal(err)
		}
		if got := probeProxy(t.Context(), kp.Addr); got != ProbeNoAnswer {
			t.Errorf("timeout toxic %s: got %q, want %q", stream, got, ProbeNoAnswer)
		}
		if err := kp.Proxy.RemoveToxic("hold"); err != nil {
			t.Fatal(err)
		}
	}
	if err := kp.Proxy.Disable(); err != nil {
		t.Fatal(err)
	}
	if got := probeProxy(t.Context(), kp.Addr); got != ProbeRefused {
		t.Errorf("proxy disabled: got %q, want %q", got, ProbeRefused)
	}
	if err := kp.Proxy.Enable(); err != nil {
		t.Fatal(err)
	}
	if got := probeProxy(t.Context(), kp.Addr); got != ProbeAnswered {
		t.Errorf("proxy enabled again: got %q, want %q", got, ProbeAnswered)
	}
}
