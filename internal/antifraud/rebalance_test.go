package antifraud

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// Each protocol makes the group run it, as the broker reports it: a classic group with
// the eager "sticky" or the "cooperative-sticky" balancer, or a KIP-848 "consumer"
// group; and the consumer decides events under each.
func TestRebalanceProtocolIsTheGroups(t *testing.T) {
	t.Parallel()
	want := map[RebalanceProtocol]string{
		RebalanceEager:             "classic sticky",
		RebalanceCooperativeSticky: "classic cooperative-sticky",
		RebalanceConsumer:          "consumer",
	}
	for _, protocol := range RebalanceProtocols {
		t.Run(string(protocol), func(t *testing.T) {
			t.Parallel()
			b := setup(t, 2)
			cfg := b.config()
			cfg.RebalanceProtocol = protocol
			b.start(t, cfg)
			b.produce(t, eventRecord(t, uuid.New(), newPayment("u-1", 100, time.Now())))
			testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
				n := b.count(t, "SELECT count(*) FROM decisions")
				return n == 1, fmt.Sprintf("%d decisions", n)
			})
			if got := b.groupProtocol(t); got != want[protocol] {
				t.Errorf("group protocol: got %q, want %q", got, want[protocol])
			}
		})
	}
}

// groupProtocol is the group's type as ListGroups reports it, and for a classic group
// the balancer DescribeGroups names.
func (b *bundle) groupProtocol(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	listed, err := b.admin.ListGroups(ctx)
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	g, ok := listed[b.group]
	if !ok {
		t.Fatalf("group %s not listed", b.group)
	}
	if g.GroupType != "classic" {
		return g.GroupType
	}
	described, err := b.admin.DescribeGroups(ctx, b.group)
	if err != nil {
		t.Fatalf("describe group: %v", err)
	}
	return "classic " + described[b.group].Protocol
}
