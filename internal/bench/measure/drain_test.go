package measure

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// countingRelay is a Relay whose table is always empty and that counts the checks.
type countingRelay struct{ checks *int }

func (countingRelay) Fill(context.Context, *pgxpool.Pool, int) error       { return nil }
func (countingRelay) Insert(context.Context, pgx.Tx, string, []byte) error { return nil }
func (countingRelay) Start(context.Context, *pgxpool.Pool, string) (*Running, error) {
	return nil, nil
}
func (c countingRelay) Pending(context.Context, *pgxpool.Pool) (bool, error) {
	*c.checks++
	return false, nil
}

// The drain asks the database only once the topic holds the backlog: before, the
// relay cannot be done, and the check would cost the relay the server's time.
func TestWaitDrainedChecksTheDatabaseOnlyOnceTheTopicHoldsTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const topic, backlog = "drain", 5
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	defer cluster.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	setup := DrainSetup{Topic: topic, Backlog: backlog, Kafka: kadm.NewClient(client)}
	checks := 0
	relay := countingRelay{checks: &checks}
	running := &Running{done: make(chan struct{})}

	for i := range backlog - 1 {
		if err := client.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = waitDrained(ctx, relay, nil, running, setup, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not drained") {
		t.Fatalf("with %d of %d records in the topic: err = %v, want the drain's timeout", backlog-1, backlog, err)
	}
	if checks != 0 {
		t.Errorf("with %d of %d records in the topic: %d checks of the database, want 0", backlog-1, backlog, checks)
	}

	if err := client.ProduceSync(ctx, &kgo.Record{Value: []byte("last")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got, err := waitDrained(ctx, relay, nil, running, setup, time.Minute)
	if err != nil {
		t.Fatalf("with the whole backlog in the topic: %v", err)
	}
	if got != 1 || checks != 1 {
		t.Errorf("with the whole backlog in the topic: %d checks reported, %d made; want 1 and 1", got, checks)
	}
}
