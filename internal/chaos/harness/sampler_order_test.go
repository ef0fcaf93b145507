package harness

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The chart of payments committed and not decided yet is the difference of two counts
// from two databases, which no single query can read. While payments are committed and
// decided as fast as one connection can, no sample may count more decisions than
// payments: a decision follows its payment's commit, so the decisions must be read
// first.
func TestSamplerNeverCountsMoreDecisionsThanPayments(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paymentsURL, consumerURL := testenv.NewDatabase(t, migrations.Payments), testenv.NewDatabase(t, migrations.Antifraud)
	payments, err := pgxpool.New(ctx, paymentsURL)
	if err != nil {
		t.Fatalf("connect to the payments database: %v", err)
	}
	defer payments.Close()
	decisions, err := pgxpool.New(ctx, consumerURL)
	if err != nil {
		t.Fatalf("connect to the consumer database: %v", err)
	}
	defer decisions.Close()

	rn := &Run{PaymentsDB: paymentsURL, ConsumerDB: consumerURL, Brokers: testenv.KafkaBrokers(t), Topic: testenv.NewTopic(t, 1), Origin: time.Now(), API: &stack.Process{}}
	s, err := newSampler(ctx, rn)
	if err != nil {
		t.Fatalf("newSampler: %v", err)
	}
	defer s.closeSources()

	// The writer commits a payment, then its decision, until the sampling is done.
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		for writing.Err() == nil {
			var id string
			err := payments.QueryRow(writing, `INSERT INTO payments (id, user_id, amount, currency, created_at) VALUES (gen_random_uuid(), 'u-1', 100, 'EUR', now()) RETURNING id::text`).Scan(&id)
			if err == nil {
				_, err = decisions.Exec(writing, `INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at) VALUES ($1, gen_random_uuid(), 'u-1', 100, 'EUR', 'approve', now())`, id)
			}
			if err != nil && writing.Err() == nil {
				writeErr = err
				return
			}
		}
	})

	var first, last verdict.Sample
	ahead := 0
	for i := range 150 {
		smp := s.sampleOnce(ctx)
		if i == 0 {
			first = smp
		}
		last = smp
		if smp.Decisions > smp.PaymentsCommitted {
			ahead++
			if ahead <= 3 {
				t.Errorf("sample %d: %d decisions, %d payments committed: more decisions than payments", i, smp.Decisions, smp.PaymentsCommitted)
			}
		}
	}
	stopWriting()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("write payments and decisions: %v", writeErr)
	}
	if ahead > 0 {
		t.Errorf("%d of 150 samples counted more decisions than payments", ahead)
	}
	// The test proves something only if decisions were written while it sampled.
	if last.Decisions-first.Decisions < 20 {
		t.Errorf("decisions went from %d to %d while sampling: want at least 20 written meanwhile", first.Decisions, last.Decisions)
	}
}
