package payment_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// holdOutbox blocks every insert into outbox_events until the returned release is
// called: a transition that reaches its outbox insert stays in flight, with its
// Idempotency-Key claimed, for as long as the test wants.
func holdOutbox(t *testing.T, b *bundle) (release func()) {
	t.Helper()
	return hold(t, b, `LOCK TABLE outbox_events IN EXCLUSIVE MODE`)
}

// holdMerchant blocks every payment of the default merchant at its insert (the foreign
// key's check waits for the merchant's row) until the returned release is called: a
// creation stays in flight there, with its Idempotency-Key claimed. Not holdOutbox:
// a creation's statements are sent as one batch and prepared before any of them runs,
// and preparing an insert into a locked table waits as well, before the claim.
func holdMerchant(t *testing.T, b *bundle) (release func()) {
	t.Helper()
	return hold(t, b, `SELECT FROM merchants WHERE id = '`+merchant.DefaultID.String()+`' FOR UPDATE`)
}

// hold runs lockSQL in a transaction that the returned release rolls back.
func hold(t *testing.T, b *bundle, lockSQL string) (release func()) {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(t.Context(), lockSQL); err != nil {
		t.Fatalf("%s: %v", lockSQL, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }) }
	t.Cleanup(release)
	return release
}

// inFlight waits until a transaction waits for a lock: the held request is in flight.
func inFlight(t *testing.T, b *bundle) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		var n int
		err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("%d waiting transactions (%v)", n, err)
	})
}

// wantInFlight checks a 409 in_flight with Retry-After.
func wantInFlight(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("%s: %d (Retry-After %q) %s, want 409 with Retry-After", what, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if e := decode[errorResponse](t, rec); e.Error.Code != payment.InFlight {
		t.Errorf("%s: error code %q, want %q", what, e.Error.Code, payment.InFlight)
	}
}

// A retry that arrives while the first request with its key is still in flight gets
// 409 and Retry-After at once and writes nothing; once the first is done, the same
// retry gets its answer.
func TestIdempotencyKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := holdMerchant(t, b)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- b.post(t, validBody, "key-in-flight") }()
	inFlight(t, b)

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- b.post(t, validBody, "key-in-flight") }()
	select {
	case rec := <-done:
		wantInFlight(t, "retry while the first is in flight", rec)
	case <-time.After(5 * time.Second):
		t.Fatal("retry while the first is in flight: no answer within 5 s, want an immediate 409")
	}
	// Another key is not held up by this one (it waits only for the merchant's row).
	release()
	rec := <-first
	if rec.Code != http.StatusCreated {
		t.Fatalf("first request: %d %s, want 201", rec.Code, rec.Body)
	}
	again := b.post(t, validBody, "key-in-flight")
	if again.Code != http.StatusCreated || again.Header().Get("Idempotent-Replayed") != "true" ||
		decode[paymentResponse](t, again).ID != decode[paymentResponse](t, rec).ID {
		t.Errorf("retry after the first: %d %s, want 201 replaying %s", again.Code, again.Body, rec.Body)
	}
	if got, want := b.count(t), (rowCounts{Payments: 1, Events: 1, Keys: 1}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
}

// The same for a transition: a repeat of a capture still in flight is 409 in_flight.
func TestTransitionKeyInFlightIs409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)
	release := holdOutbox(t, b)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- b.transition(t, id, payment.ActionCapture, "", "capture-in-flight") }()
	inFlight(t, b)
	wantInFlight(t, "capture retried while in flight", b.transition(t, id, payment.ActionCapture, "", "capture-in-flight"))
	release()
	if rec := <-first; rec.Code != http.StatusOK {
		t.Fatalf("first capture: %d %s, want 200", rec.Code, rec.Body)
	}
	if got := b.lifecycle(t, id); got.Events != 2 {
		t.Errorf("events of the payment = %d, want 2 (created, one capture)", got.Events)
	}
}

// Many clients at once with one key, round after round: never a second payment; each
// answer is the payment (once new, then replayed) or 409 in_flight with Retry-After.
func TestIdempotencyKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rounds, clients = 40, 8
	var conflicts int
	for round := range rounds {
		key := fmt.Sprintf("key-concurrent-%d", round)
		recs := make([]*httptest.ResponseRecorder, clients)
		var wg sync.WaitGroup
		barrier := make(chan struct{})
		for i := range clients {
			wg.Go(func() {
				<-barrier
				recs[i] = b.post(t, validBody, key)
			})
		}
		close(barrier)
		wg.Wait()
		fresh, id := 0, ""
		for i, rec := range recs {
			switch rec.Code {
			case http.StatusCreated:
				p := decode[paymentResponse](t, rec)
				if id != "" && p.ID != id {
					t.Fatalf("round %d: client %d got payment %s, another got %s: two payments for one key", round, i, p.ID, id)
				}
				id = p.ID
				if rec.Header().Get("Idempotent-Replayed") != "true" {
					fresh++
				}
			case http.StatusConflict:
				wantInFlight(t, fmt.Sprintf("round %d client %d", round, i), rec)
				conflicts++
			default:
				t.Fatalf("round %d client %d: %d %s, want 201 or 409", round, i, rec.Code, rec.Body)
			}
		}
		if fresh != 1 {
			t.Fatalf("round %d: %d new payments, want exactly 1", round, fresh)
		}
	}
	if got, want := b.count(t), (rowCounts{Payments: rounds, Events: rounds, Keys: rounds}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
	t.Logf("%d answers of %d were 409 in_flight", conflicts, rounds*clients)
}

// Keys are the merchant's: two merchants with one key make two payments, and neither
// replays the other's.
func TestIdempotencyKeysArePerMerchant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, err := merchant.NewStore(b.pool).CreateKey(t.Context(), "other")
	if err != nil {
		t.Fatalf("create merchant: %v", err)
	}
	mine := b.post(t, validBody, "shared-key")
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(validBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "shared-key")
	req.Header.Set(testMerchantHeader, other.MerchantID.String())
	theirs := httptest.NewRecorder()
	b.handler.ServeHTTP(theirs, req)
	if mine.Code != http.StatusCreated || theirs.Code != http.StatusCreated || theirs.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("two merchants, one key: %d and %d (replayed %q), want two new 201s", mine.Code, theirs.Code, theirs.Header().Get("Idempotent-Replayed"))
	}
	if decode[paymentResponse](t, mine).ID == decode[paymentResponse](t, theirs).ID {
		t.Error("two merchants, one key: the same payment, want one each")
	}
	if got, want := b.count(t), (rowCounts{Payments: 2, Events: 2, Keys: 2}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
}
