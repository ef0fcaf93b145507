package cdc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// replay sends the dead letter id back for delivery through the operator's endpoint,
// as another replica's API would: this relay hears of it only at its next look.
func (b *testBundle) replay(t *testing.T, id uuid.UUID) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /admin/dlq/{event_id}/replay", outbox.NewDLQ(b.pool, b.logger).HandleReplay(func() {}))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/dlq/"+id.String()+"/replay", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("replay %s: %d %s", id, rec.Code, rec.Body)
	}
}

// insertFor commits one event of aggregate in a transaction of its own.
func (b *testBundle) insertFor(t *testing.T, aggregate string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload) VALUES ($1, 'TestEvent', $2, '{}')`,
		id, aggregate); err != nil {
		t.Fatal(err)
	}
	return id
}

// A replayed event is pending again until the relay publishes it, which the stream does
// not tell it about: it looks for replays only every StatusInterval. Meanwhile a new
// event of the same aggregate must not overtake it: the aggregate stays blocked while
// its earlier event has a DLQ row and is not published, so the new event goes to the
// DLQ behind it, and reaches the topic after it once replayed in turn.
func TestReplayedEventIsNotOvertaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.cfg.StatusInterval = 2 * time.Second // the window in which the replay is not seen yet
	first := b.insertFor(t, "pay")
	if _, err := (store{pool: b.pool}).deadLetter(ctx, first, "poison"); err != nil {
		t.Fatal(err)
	}
	r := b.start(t)
	testenv.WaitFor(t, 90*time.Second, func() (bool, string) { return r.streaming(), "relay not streaming" })

	b.replay(t, first)
	third := b.insertFor(t, "pay")
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		done := b.count(t, `SELECT count(*) FROM outbox_published WHERE id = $1`, first) == 1 &&
			b.count(t, `SELECT (SELECT count(*) FROM outbox_published WHERE id = $1)
			                 + (SELECT count(*) FROM outbox_dlq WHERE event_id = $1 AND replayed_at IS NULL)`, third) == 1
		return done, "replayed event not published, or the later one neither published nor dead-lettered"
	})
	if b.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = $1 AND replayed_at IS NULL`, third) == 1 {
		b.replay(t, third)
		r.relay.Replayed()
		b.waitPublished(t, 2, 60*time.Second)
	}

	records := b.consume(t, 2, 60*time.Second)
	var order []uuid.UUID
	for _, rec := range records {
		for _, h := range rec.Headers {
			if h.Key == "X-Event-Id" {
				order = append(order, uuid.MustParse(string(h.Value)))
			}
		}
	}
	if diff := cmp.Diff([]uuid.UUID{first, third}, order); diff != "" {
		t.Errorf("topic order (-want: the replayed event, then the later one; +got):\n%s", diff)
	}
}

// The blocking rule on its own: an aggregate is blocked by an earlier event that is
// failed, or replayed and not yet published, unless Kafka acknowledged it already (its
// mark may still be running); never by a later event, nor by its own event.
func TestBlockedAggregates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := store{pool: b.pool}
	seqOf := func(id uuid.UUID) int64 {
		return int64(b.count(t, `SELECT seq FROM outbox_events WHERE id = $1`, id))
	}
	replayed := b.insertFor(t, "replayed")
	replayedNext := b.insertFor(t, "replayed")
	failed := b.insertFor(t, "failed")
	failedNext := b.insertFor(t, "failed")
	clear := b.insertFor(t, "clear")
	for _, id := range []uuid.UUID{replayed, failed} {
		if _, err := s.deadLetter(ctx, id, "poison"); err != nil {
			t.Fatal(err)
		}
	}
	b.replay(t, replayed)
	event := func(id uuid.UUID, aggregate string) outboxEvent {
		return outboxEvent{ID: id, AggregateID: aggregate, Seq: seqOf(id)}
	}

	tests := []struct {
		name      string
		events    []outboxEvent
		published []uuid.UUID
		want      map[string]bool
	}{
		{"behind a replayed event and a failed one", []outboxEvent{event(replayedNext, "replayed"), event(failedNext, "failed"), event(clear, "clear")}, nil,
			map[string]bool{"replayed": true, "failed": true}},
		{"the replayed event itself", []outboxEvent{event(replayed, "replayed")}, nil, map[string]bool{}},
		{"behind a replayed event Kafka acknowledged", []outboxEvent{event(replayedNext, "replayed")}, []uuid.UUID{replayed}, map[string]bool{}},
	}
	for _, tt := range tests {
		got, err := s.blockedAggregates(ctx, tt.events, tt.published)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: blocked aggregates (-want +got):\n%s", tt.name, diff)
		}
	}
}
