package antifraud

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// TestSliceBatchKeepsUsersAndPaymentsTogether checks the split of a poll (slice.go):
// each user's events in one slice, in poll order, copies folded, poison in the first
// slice, and a payment whose later event names another user kept with its creation.
func TestSliceBatchKeepsUsersAndPaymentsTogether(t *testing.T) {
	t.Parallel()
	c, err := NewConsumer(nil, Config{Brokers: []string{"unused:9092"}, Parallelism: 4}, discardLogger(), mustMetrics(t))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	var records []*kgo.Record
	var want []uuid.UUID // the event ids, once each, in poll order
	for i := range 40 {
		p := newPayment(fmt.Sprintf("u-%d", i%8), 100, time.Now())
		r := eventRecord(t, uuid.New(), p)
		records = append(records, r, copyRecord(r)) // every event twice
		want = append(want, eventIDOf(t, r))
		if i%5 == 0 {
			// A capture that names another user (a producer bug) must stay with its
			// payment, or two slices would apply the payment's events side by side.
			other := p
			other.UserID = "u-elsewhere"
			capture := transitionRecord(t, event.TypePaymentCaptured, other, 2, 0)
			records = append(records, capture)
			want = append(want, eventIDOf(t, capture))
		}
	}
	records = append(records, &kgo.Record{Value: []byte("not an event")})

	slices := c.sliceBatch(records)
	if len(slices) < 2 {
		t.Fatalf("%d slices of 8 users at parallelism 4, want at least 2", len(slices))
	}
	sliceOfUser, sliceOfPayment := map[string]int{}, map[uuid.UUID]int{}
	position := map[uuid.UUID]int{}
	for i, id := range want {
		position[id] = i
	}
	var got []uuid.UUID
	for i, s := range slices {
		if len(s.poison) > 0 && i != 0 {
			t.Errorf("slice %d holds %d poison records, want them in slice 0", i, len(s.poison))
		}
		for j, ev := range s.unique {
			got = append(got, ev.id)
			if ev.typ == event.TypePaymentCreated {
				if k, ok := sliceOfUser[ev.payload.UserID]; ok && k != i {
					t.Errorf("user %s in slices %d and %d, want one", ev.payload.UserID, k, i)
				}
				sliceOfUser[ev.payload.UserID] = i
				sliceOfPayment[ev.payload.PaymentID] = i
				if d := s.rows[j].deliveries; d != 2 {
					t.Errorf("event %s: %d deliveries, want 2", ev.id, d)
				}
			} else if k := sliceOfPayment[ev.payload.PaymentID]; k != i {
				t.Errorf("capture of payment %s in slice %d, its creation in %d", ev.payload.PaymentID, i, k)
			}
			if j > 0 && position[s.unique[j-1].id] > position[ev.id] {
				t.Errorf("slice %d: event %s before %s, want poll order", i, s.unique[j-1].id, ev.id)
			}
		}
	}
	if len(slices[0].poison) != 1 {
		t.Errorf("%d poison records in slice 0, want 1", len(slices[0].poison))
	}
	if diff := cmp.Diff(len(want), len(got)); diff != "" {
		t.Errorf("events over all slices (-want +got):\n%s", diff)
	}
}

func eventIDOf(t *testing.T, r *kgo.Record) uuid.UUID {
	t.Helper()
	ev, poison := decodeRecord(r)
	if poison != nil {
		t.Fatalf("decode: %v", poison)
	}
	return ev.id
}

// TestSlicedBatchDecidesAsOneTransaction processes one poll split in four and the same
// poll in one transaction, into two databases: the decisions and totals must be the same,
// velocity included, since a user's events of the poll stay in one slice.
func TestSlicedBatchDecidesAsOneTransaction(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(-time.Minute)
	var records []*kgo.Record
	for i := range 60 {
		// 3 users with 20 payments a second apart: velocity blocks from the 11th on.
		p := newPayment(fmt.Sprintf("u-%d", i%3), 100, start.Add(time.Duration(i)*time.Second))
		records = append(records, eventRecord(t, uuid.New(), p))
	}
	decisions := func(parallelism int) (map[uuid.UUID]Verdict, map[totalKey]Total) {
		b := setup(t, 1)
		cfg := b.config()
		cfg.Parallelism = parallelism
		c := b.newConsumer(t, cfg)
		var batch []*kgo.Record
		for _, r := range records {
			batch = append(batch, copyRecord(r))
		}
		if _, err := c.processBatch(context.Background(), b.positioned(batch...)); err != nil {
			t.Fatalf("processBatch at parallelism %d: %v", parallelism, err)
		}
		rows, err := b.pool.Query(context.Background(), `SELECT payment_id, decision FROM decisions`)
		if err != nil {
			t.Fatalf("select decisions: %v", err)
		}
		defer rows.Close()
		got := map[uuid.UUID]Verdict{}
		for rows.Next() {
			var id uuid.UUID
			var v Verdict
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatalf("scan decision: %v", err)
			}
			got[id] = v
		}
		return got, b.totals(t)
	}
	oneVerdicts, oneTotals := decisions(1)
	slicedVerdicts, slicedTotals := decisions(4)
	blocked := 0
	for _, v := range oneVerdicts {
		if v == Block {
			blocked++
		}
	}
	if blocked != 30 {
		t.Fatalf("%d blocked in one transaction, want 30 (the test needs the velocity rule to fire)", blocked)
	}
	if diff := cmp.Diff(oneVerdicts, slicedVerdicts); diff != "" {
		t.Errorf("verdicts, one transaction (-) vs four slices (+):\n%s", diff)
	}
	if diff := cmp.Diff(oneTotals, slicedTotals, cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("totals, one transaction (-) vs four slices (+):\n%s", diff)
	}
}
