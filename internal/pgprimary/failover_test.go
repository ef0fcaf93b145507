package pgprimary_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The primary crashes under a running polling relay and antifraud consumer, payments
// being created all along, and its standby is promoted. On multi-host URLs with
// target_session_attrs=read-write, both carry on against the new primary without a
// restart, each Watcher counts one change of primary, and every payment whose COMMIT
// succeeded gets its antifraud decision. The replication is synchronous
// (testenv.NewPrivateStandby), so a commit the primary acknowledged is on the standby.
// Both servers are the test's own: the shared one must never be stopped by a test.
func TestRelayAndConsumerFollowAPromotedStandby(t *testing.T) {
	t.Parallel()
	primary := testenv.NewPrivatePostgres(t)
	standby := testenv.NewPrivateStandby(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for name, set := range map[string]migrations.Set{"payments": migrations.Payments, "antifraud": migrations.Antifraud} {
		dbURL, err := devstack.CreateDatabase(ctx, primary.URL, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := devstack.MigrateDatabase(ctx, dbURL, set); err != nil {
			t.Fatal(err)
		}
	}
	logger := testLogger(t)
	brokers, topic := testenv.KafkaBrokers(t), testenv.NewTopic(t, 3)

	// The API's side: its pool, its watcher and its relay.
	apiReg := prometheus.NewRegistry()
	apiWatcher := newWatcher(t, logger.With("process", "api"), apiReg)
	payments := openPool(t, testenv.MultiHostURL("payments", primary, standby), apiWatcher)
	relayMetrics, err := poll.NewMetrics(apiReg)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := poll.NewRelay(payments, poll.Config{
		Brokers: brokers, Topic: topic, Workers: 2,
		PublishTimeout: time.Second, QueryTimeout: time.Second, Lease: 3 * time.Second,
		PollInterval: 100 * time.Millisecond, StatsInterval: 100 * time.Millisecond,
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		OutageBackoffBase: 50 * time.Millisecond, OutageBackoffMax: 500 * time.Millisecond,
		ShutdownTimeout: 2 * time.Second,
	}, logger.With("process", "api"), relayMetrics)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "relay", relay.Run)

	// The consumer's side: its pool, its watcher and the consumer.
	consumerReg := prometheus.NewRegistry()
	consumerWatcher := newWatcher(t, logger.With("process", "consumer"), consumerReg)
	decisions := openPool(t, testenv.MultiHostURL("antifraud", primary, standby), consumerWatcher)
	consumerMetrics, err := antifraud.NewMetrics(consumerReg)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := antifraud.NewConsumer(decisions, antifraud.Config{
		Brokers: brokers, Topic: topic, Group: "test-failover-" + uuid.NewString(),
		MaxPollRecords: 20, RetryBackoffMax: 200 * time.Millisecond,
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)},
	}, logger.With("process", "consumer"), consumerMetrics)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "consumer", consumer.Run)

	w := startWriter(t, payment.NewTracedStore(payments, nil))
	decided := func() int {
		var n int
		if err := decisions.QueryRow(ctx, `SELECT count(*) FROM decisions`).Scan(&n); err != nil {
			return -1 // the database is failing over: not a count
		}
		return n
	}
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		n := decided()
		return n >= 30, fmt.Sprintf("%d decisions before the crash, want 30", n)
	})
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// Decisions counted from now on are on the new primary, the only server left.
	var before int
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		before = decided()
		return before >= 0, "no answer from the new primary"
	})
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		n := decided()
		return n >= before+30, fmt.Sprintf("%d decisions on the new primary, want %d: the relay or the consumer did not follow it", n, before+30)
	})
	w.stop()

	for _, pool := range []*pgxpool.Pool{payments, decisions} {
		var server string
		if err := pool.QueryRow(ctx, `SELECT host(inet_server_addr()) || ':' || inet_server_port()`).Scan(&server); err != nil {
			t.Fatal(err)
		}
		if server != standby.Addr {
			t.Errorf("a pool reaches %s, want the promoted standby %s", server, standby.Addr)
		}
	}
	// Every payment on the new primary, which holds every acknowledged one, is decided:
	// a committed event the relay or the consumer lost would never be.
	var created []uuid.UUID
	rows, _ := payments.Query(ctx, `SELECT id FROM payments`)
	if created, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
		t.Fatal(err)
	}
	onNewPrimary := make(map[uuid.UUID]bool, len(created))
	for _, id := range created {
		onNewPrimary[id] = true
	}
	for id := range w.acknowledged() {
		if !onNewPrimary[id] {
			t.Fatalf("payment %s was committed (Create returned it) but is not on the new primary", id)
		}
	}
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		var undecided int
		err := decisions.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) AS p(id)
			WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.payment_id = p.id)`, created).Scan(&undecided)
		if err != nil {
			return false, err.Error()
		}
		return undecided == 0, fmt.Sprintf("%d of %d committed payments have no decision", undecided, len(created))
	})
	for name, reg := range map[string]*prometheus.Registry{"api": apiReg, "consumer": consumerReg} {
		if got := primaryChanges(t, reg); got != 1 {
			t.Errorf("%s: postgres_primary_changes_total = %v, want 1", name, got)
		}
	}
	t.Logf("%d payments committed, %d acknowledged to the writer, all decided", len(created), len(w.acknowledged()))
}
