package network

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// A shortRetention is kafka-down's second fault: the API runs with a retention of its
// published outbox rows far shorter than the outage (RELAY_RETENTION, optional tuning of
// docs/contract.md) and a cleanup that runs every RELAY_CLEANUP_INTERVAL, so that its
// cleanup runs many times while nothing can be published. A cleanup that deletes
// outbox rows by age alone, published or not, then deletes events that were never
// published: the lost row catches it. To prove that the cleanup ran during the outage,
// the harness counts the published rows from outside at its start and every half second
// during it: nothing is published while the broker is unreachable, so a count that
// falls is the cleanup deleting.
type shortRetention struct {
	Retention, Interval time.Duration

	mu sync.Mutex
	// atStart is the count of published rows when the outage began, least the smallest
	// seen during it; -1 before any count.
	atStart, least int
	// table is where the published rows were counted; empty when the service keeps
	// none the harness can read.
	table string
	err   error
}

// env is the API's environment: the contract's names, for ours and a student's.
func (s *shortRetention) env() []string {
	return []string{"RELAY_RETENTION=" + s.Retention.String(), "RELAY_CLEANUP_INTERVAL=" + s.Interval.String()}
}

// holdOutage holds kind for d, counting the published rows meanwhile.
func (s *shortRetention) holdOutage(ctx context.Context, rn *harness.Run, kind faults.Kind, d time.Duration) error {
	s.mu.Lock()
	s.atStart, s.least, s.table, s.err = -1, -1, "", nil
	s.mu.Unlock()
	counted := make(chan struct{})
	countCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); <-counted }()
	// The last count comes half a second before the fault is cleared, while nothing
	// can be published.
	go func() {
		defer close(counted)
		s.count(countCtx, rn.PaymentsDB, time.Now().Add(d-500*time.Millisecond))
	}()
	return rn.Faults.Hold(ctx, kind, d)
}

// count reads the published rows every half second until until or ctx's end.
func (s *shortRetention) count(ctx context.Context, dbURL string, until time.Time) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		s.fail(fmt.Errorf("connect to the payments database: %w", err))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	query, table, err := publishedCountSQL(ctx, conn)
	if err != nil || query == "" {
		s.fail(err)
		return
	}
	s.mu.Lock()
	s.table = table
	s.mu.Unlock()
	for time.Now().Before(until) {
		var n int
		if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
			if ctx.Err() == nil {
				s.fail(fmt.Errorf("count published rows: %w", err))
			}
			return
		}
		s.mu.Lock()
		if s.atStart < 0 {
			s.atStart = n
		}
		if s.least < 0 || n < s.least {
			s.least = n
		}
		s.mu.Unlock()
		if backoff.Until(ctx, time.Now().Add(500*time.Millisecond)) != nil {
			return
		}
	}
}

func (s *shortRetention) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// publishedCountSQL returns the query that counts the published rows of the outbox, and
// its table: outbox_published when published events move there, the rows of
// outbox_events with a published_at otherwise; "" when the service has neither.
func publishedCountSQL(ctx context.Context, conn *pgx.Conn) (query, table string, err error) {
	moved, err := verify.HasColumn(ctx, conn, "outbox_published", "published_at")
	if err != nil || moved {
		return "SELECT count(*) FROM outbox_published", "outbox_published", err
	}
	inPlace, err := verify.HasColumn(ctx, conn, "outbox_events", "published_at")
	if err != nil || !inPlace {
		return "", "", err
	}
	return "SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL", "outbox_events", nil
}

// check is the validity row: the cleanup deleted published rows during the outage. A
// service the harness did not start cannot be given the retention, and a student's that
// deleted nothing has no cleanup the contract's variables drive: the row is off for
// them and says so, since neither is a fault of the service.
func (s *shortRetention) check(rn *harness.Run, outage time.Duration) verdict.Check {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := fmt.Sprintf("published rows deleted by the service's cleanup while Kafka was down (RELAY_RETENTION=%s, RELAY_CLEANUP_INTERVAL=%s, outage %s; counted at its start and during it)",
		s.Retention, s.Interval, outage)
	deleted := s.atStart - s.least
	got := fmt.Sprintf("%d (%s: %d at the start, least %d)", deleted, s.table, s.atStart, s.least)
	switch {
	case rn.Group == "":
		return verdict.OffCheck(verdict.Validity, name, "> 0", "the harness did not start this service, so it could not shorten its retention")
	case s.err != nil:
		return verdict.NewCheck(verdict.Validity, name, "> 0", "not counted: "+s.err.Error(), false)
	case s.table == "" && rn.RelayMode == "":
		return verdict.OffCheck(verdict.Validity, name, "> 0", "no outbox_published and no outbox_events.published_at: published rows not counted")
	case deleted <= 0 && rn.RelayMode == "":
		return verdict.OffCheck(verdict.Validity, name, "> 0", got+": the service deleted no published row, so it has no cleanup that RELAY_RETENTION and RELAY_CLEANUP_INTERVAL drive (optional tuning, docs/contract.md) and none was tested")
	}
	return verdict.NewCheck(verdict.Validity, name, "> 0", got, s.atStart >= 0 && deleted > 0)
}
