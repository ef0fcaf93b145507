package antifraud

import (
	"context"
	"database/sql"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver goose runs on
	"github.com/pressly/goose/v3"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// TestProgressMovesIntoDecisions migrates a database down to payment_progress (00006)
// and up again: the progress of a payment past its creation must land in its decision
// row, that of a payment only created must leave the columns NULL, and the order check
// must read both as they were.
func TestProgressMovesIntoDecisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.NewDatabase(t, migrations.Antifraud)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	// The version table is the one migrations.Antifraud names.
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Antifraud.Files(),
		goose.WithTableName("goose_db_version_antifraud"))
	if err != nil {
		t.Fatalf("goose provider: %v", err)
	}
	if _, err := provider.DownTo(ctx, 6); err != nil {
		t.Fatalf("migrate down to 00006: %v", err)
	}

	created, captured := uuid.New(), uuid.New()
	createdEvent, capturedEvent, refundEvent := uuid.New(), uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at)
			VALUES ($1, $2, 'u-1', 100, 'EUR', 'approve', now()), ($3, $4, 'u-1', 100, 'EUR', 'approve', now())`,
			[]any{created, createdEvent, captured, capturedEvent}},
		{`INSERT INTO payment_progress (payment_id, last_sequence, state, last_event_id)
			VALUES ($1, 1, 'PaymentCreated', $2), ($3, 3, 'PaymentRefunded', $4)`,
			[]any{created, createdEvent, captured, refundEvent}},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("fill 00006 tables: %v", err)
		}
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	of := func(id uuid.UUID) paymentEvent {
		return paymentEvent{payload: event.PaymentCreated{PaymentID: id}}
	}
	got, err := selectProgress(ctx, tx, []paymentEvent{of(created), of(captured)})
	if err != nil {
		t.Fatalf("select progress: %v", err)
	}
	want := map[uuid.UUID]progress{
		created:  {sequence: 1, lastType: event.TypePaymentCreated, eventID: createdEvent},
		captured: {sequence: 3, lastType: event.TypePaymentRefunded, eventID: refundEvent},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(progress{})); diff != "" {
		t.Errorf("progress after the migration mismatch (-want +got):\n%s", diff)
	}
	var nulls int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM decisions WHERE last_sequence IS NULL`).Scan(&nulls); err != nil {
		t.Fatalf("count: %v", err)
	}
	if nulls != 1 {
		t.Errorf("%d decision rows with no progress written, want 1 (the payment only created)", nulls)
	}
}
