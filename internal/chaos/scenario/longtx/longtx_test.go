package longtx

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The pending-scan probe reads the buffers out of PostgreSQL's JSON plan: a parse that
// silently found nothing would report -1, and the figure would be missing from every
// long-transaction report.
func TestPendingScanBuffersReadsThePlan(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testenv.NewDatabase(t, migrations.Payments))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(t.Context()) })
	if got := pendingScanBuffers(t.Context(), conn); got < 1 {
		t.Errorf("pendingScanBuffers on an empty outbox = %d, want at least the index's root page", got)
	}
}
