package outbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testBundle is what the write side's tests start from: a fresh migrated database.
type testBundle struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{pool: testenv.NewPool(t, migrations.Payments), logger: testLogger(t)}
}

// testLogger writes to the test log only with -v, to keep failures readable.
func testLogger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func newMessage(t *testing.T, aggregate string, n int) Message {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"aggregate": aggregate, "n": n})
	if err != nil {
		t.Fatal(err)
	}
	return Message{ID: uuid.New(), Type: "TestEvent", AggregateID: aggregate, Payload: payload, OccurredAt: time.Now()}
}

// insert commits each message in a transaction of its own, as the API does.
func (b *testBundle) insert(t *testing.T, msgs ...Message) {
	t.Helper()
	for _, msg := range msgs {
		err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			return Insert(context.Background(), tx, msg)
		})
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
}

// movePublished moves the events of aggregate to outbox_published as the relay's mark
// does, published (and created) age ago.
func (b *testBundle) movePublished(t *testing.T, aggregate string, age time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		WITH moved AS (DELETE FROM outbox_events WHERE aggregate_id = $1 RETURNING *)
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, published_at)
		SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections,
		       now() - make_interval(secs => $2), now() - make_interval(secs => $2)
		FROM moved`, aggregate, age.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
