package poll

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The classification decides whether an event can ever reach the DLQ: a transport
// failure classified as a rejection would dead-letter a whole backlog during an outage.
func TestFailureOfTellsRejectionsFromTransportFailures(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{RetryBase: time.Second, RetryMax: time.Minute,
		OutageBackoffBase: 100 * time.Millisecond, OutageBackoffMax: 10 * time.Second}}
	tests := []struct {
		name         string
		err          error
		wantRejected bool
	}{
		{"record too large", kerr.MessageTooLarge, true},
		{"record list too large", kerr.RecordListTooLarge, true},
		{"invalid record", kerr.InvalidRecord, true},
		// Faults of the relay host, not of the event: every record would get them.
		{"corrupt message", kerr.CorruptMessage, false},
		{"invalid timestamp (host clock skewed)", kerr.InvalidTimestamp, false},
		{"wrapped rejection", fmt.Errorf("produce: %w", kerr.MessageTooLarge), true},
		{"deadline while in flight", context.DeadlineExceeded, false},
		{"leader moved", kerr.NotLeaderForPartition, false},
		{"not enough replicas", kerr.NotEnoughReplicas, false},
		{"unknown topic", kerr.UnknownTopicOrPartition, false},
		{"missing authorisation", kerr.TopicAuthorizationFailed, false},
		{"closed client", kgo.ErrClientClosed, false},
		{"refused connection", errors.New("dial tcp 127.0.0.1:9092: connect: connection refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := claimedEvent{ID: uuid.New(), Attempts: 3, Rejections: 2}
			f := r.failureOf(e, tt.err)
			if f.ID != e.ID || f.Err != tt.err.Error() {
				t.Errorf("failureOf = {ID: %s, Err: %q}, want {ID: %s, Err: %q}", f.ID, f.Err, e.ID, tt.err.Error())
			}
			if f.Rejected != tt.wantRejected {
				t.Errorf("failureOf(%v).Rejected = %t, want %t", tt.err, f.Rejected, tt.wantRejected)
			}
			// A rejection waits out its backoff on its rejections (1 s doubled twice,
			// jittered); a transport failure the outage backoff on its attempts (100 ms
			// doubled three times), which takes it off the head of the queue.
			if tt.wantRejected && (f.RetryIn < 2*time.Second || f.RetryIn > 4*time.Second) {
				t.Errorf("failureOf(%v).RetryIn = %s, want within [2s, 4s]", tt.err, f.RetryIn)
			}
			if !tt.wantRejected && (f.RetryIn < 400*time.Millisecond || f.RetryIn > 800*time.Millisecond) {
				t.Errorf("failureOf(%v).RetryIn = %s, want within [400ms, 800ms]", tt.err, f.RetryIn)
			}
		})
	}
}

// A relay host whose clock is off by more than the broker's
// log.message.timestamp.*.max.ms gets every record refused with INVALID_TIMESTAMP.
// That is the host's fault, not any event's: the relay must pause as in an outage and
// dead-letter nothing, however many batches fail.
func TestRelayPausesAndDeadLettersNothingWhenEveryTimestampIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxRejections = 1 // a single misclassified failure would dead-letter
	var msgs []outbox.Message
	for i := range 5 {
		msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	b.insert(t, msgs...)
	// The broker refuses every produce with INVALID_TIMESTAMP, as it does the records
	// of a host whose clock is off.
	cluster := b.useKfake(t)
	cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: b.topic, Err: kerr.InvalidTimestamp, Count: -1})
	r := b.newRelay(t)
	skewedHost := newProducer(t, r)

	for range 3 {
		if _, err := r.runOnce(context.Background(), &worker{own: skewedHost, alone: skewedHost}, wokenByPoll); err != nil {
			t.Fatalf("runOnce: %v", err)
		}
		// As if each event's own outage backoff had passed, so that the next round
		// claims them all again.
		if _, err := b.pool.Exec(context.Background(), `UPDATE outbox_events SET next_attempt_at = now()`); err != nil {
			t.Fatal(err)
		}
	}

	if got := b.count(t, `SELECT count(*) FROM outbox_dlq`); got != 0 {
		t.Errorf("DLQ rows: %d, want 0", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND rejections = 0 AND attempts = 3`); got != len(msgs) {
		t.Errorf("pending events with 3 attempts and no rejection: %d, want %d", got, len(msgs))
	}
	if got := b.failures(t, "rejected"); got != 0 {
		t.Errorf("rejected failures: %v, want 0", got)
	}
	if got := r.outage.remaining(); got <= 0 {
		t.Errorf("outage pause remaining %s, want the relay paused", got)
	}
}

// The classification must not hide a true poison record: one oversized record among
// good ones, rejected with its whole batch, still reaches the DLQ on its own, and the
// others are published.
func TestRelayDeadLettersOneOversizedRecordAmongGoodOnes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxRejections = 1
	var msgs []outbox.Message
	for i := range 6 {
		msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	// Random padding: the producer compresses batches, and the broker's limit applies
	// to the compressed size.
	payload, err := json.Marshal(testEvent{Aggregate: "agg-2", Padding: base64.StdEncoding.EncodeToString(randomBytes(t, 48<<10))})
	if err != nil {
		t.Fatal(err)
	}
	msgs[2].Payload = payload
	b.insert(t, msgs...)
	poison := msgs[2].ID.String()
	// The broker refuses a partition's batch larger than 4 KiB with MESSAGE_TOO_LARGE:
	// the poison's batch, with any good record that shares its partition.
	b.useKfake(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	r := b.newRelay(t)
	broker := newProducer(t, r)

	if _, err := r.runOnce(context.Background(), &worker{own: broker, alone: broker}, wokenByPoll); err != nil {
		t.Fatalf("runOnce: %v", err)
	}

	if got := b.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = $1`, poison); got != 1 {
		t.Errorf("DLQ rows of the oversized event: %d, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_published WHERE rejections = 0`); got != len(msgs)-1 {
		t.Errorf("published events without a rejection: %d, want %d", got, len(msgs)-1)
	}
}

// After a rejected batch each record is sent again on its own, and that can take far
// longer than the batch. It must end while the lease holds: a worker that outlives its
// lease lets another claim the same rows and publish the acknowledged ones again. And
// the record sent on its own must really be alone, or an innocent event sharing a
// broker batch with another worker's poison is charged a rejection.
func TestRelayIsolatesRejectionsWithinTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 3
	b.cfg.MaxRejections = 1
	b.cfg.Lease = time.Second
	b.cfg.PublishTimeout = 300 * time.Millisecond
	b.cfg.QueryTimeout = 300 * time.Millisecond
	r := b.newRelay(t)
	var poison, good []string
	for i := range 16 {
		msg := newMessage(t, fmt.Sprintf("agg-%d", i), 0)
		b.insert(t, msg)
		if i%2 == 0 {
			poison = append(poison, msg.ID.String())
		} else {
			good = append(good, msg.ID.String())
		}
	}
	// 16 records resent one by one at 100 ms each outlast the 1 s lease.
	reject := rejectIDs(kerr.MessageTooLarge, poison...)
	// Fakes, not kfake: the test needs every call slowed and each client's
	// acknowledgements counted on their own, which kfake's controls do not give per
	// client.
	shared := &fakeProducer{delay: 100 * time.Millisecond, reject: reject}
	alone := &fakeProducer{delay: 100 * time.Millisecond, reject: reject}
	startWorkers(t, r, shared, alone)

	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		got := b.statusCounts(t)
		return got["published"] == len(good) && got["failed"] == len(poison),
			fmt.Sprintf("outbox statuses %v, want %d published and %d failed", got, len(good), len(poison))
	})
	for _, id := range good {
		if n := shared.ackCount(id) + alone.ackCount(id); n != 1 {
			t.Errorf("event %s acknowledged %d times, want once", id, n)
		}
	}
	alone.mu.Lock()
	if alone.maxInFlight != 1 || alone.maxRecords != 1 {
		t.Errorf("resends on their own: up to %d calls at once with up to %d records, want 1 and 1",
			alone.maxInFlight, alone.maxRecords)
	}
	alone.mu.Unlock()
	if got := b.count(t, `SELECT count(*) FROM outbox_published WHERE rejections > 0`); got != 0 {
		t.Errorf("published events charged a rejection: %d, want 0", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_dlq`); got != len(poison) {
		t.Errorf("DLQ rows: %d, want %d", got, len(poison))
	}
}

// A batch whose only failure is a failed probe of a partition known to be down says
// nothing about the broker: it leaves the relay's pause as it is. It is logged all
// the same, or a relay whose probes keep failing (as in the replica-pause chaos
// scenario) would fall silent while nothing publishes; a batch whose records were all
// held back, unsent, has nothing new to say.
func TestFailedProbeIsLoggedAndPausesNothing(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	r := &Relay{
		logger:  slog.New(slog.NewTextHandler(&log, nil)),
		metrics: newTestMetrics(t, prometheus.NewRegistry()),
		outage:  &outageBackoff{base: time.Second, max: time.Minute},
	}
	heldBack := failure{ID: uuid.New(), HeldBack: true, Err: "held back"}
	r.judgeFailures(0, []failure{heldBack}, false)
	if log.Len() != 0 {
		t.Errorf("a batch held back whole logged %q, want nothing", log.String())
	}

	probe := failure{ID: uuid.New(), Probed: true, Err: context.DeadlineExceeded.Error()}
	r.judgeFailures(0, []failure{probe, heldBack}, false)
	if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "still do not") {
		t.Errorf("a failed probe logged %q, want a warning that the partitions still do not answer", got)
	}
	if pause := r.outage.remaining(); pause > 0 {
		t.Errorf("a failed probe paused the relay for %v, want no pause", pause)
	}
}
