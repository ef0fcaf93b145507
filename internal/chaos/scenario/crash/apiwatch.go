package crash

import (
	"context"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// An apiWatch looks at the API from outside, through its payments database only, for
// the moment a kill tests the write path: a payment (or one of its transitions)
// committed while its outbox row is not. A service that writes both in one transaction never shows that moment, so a
// kill there changes nothing; one that writes them in two transactions loses the
// event for good. The outbox table is a MAY of the contract: without outbox_events
// there is nothing to compare, and the kills stay at random points only.
type apiWatch struct {
	rn *harness.Run
	db *pgx.Conn
	// committedEvents counts the events the payments table says were committed: with
	// the lifecycle columns, the sum of the payments' versions (one event per
	// transition, the creation included); without, one per payment.
	committedEvents string
	// outboxEvents counts the events written to the outbox: the rows of outbox_events,
	// plus those of outbox_published when published events move there.
	outboxEvents string
}

// newAPIWatch connects to the payments database. It returns nil, and no error, when
// the service keeps no outbox_events table.
func newAPIWatch(ctx context.Context, rn *harness.Run) (*apiWatch, error) {
	db, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return nil, fmt.Errorf("connect to the payments database: %w", err)
	}
	var hasOutbox bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('outbox_events') IS NOT NULL`).Scan(&hasOutbox); err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("look up outbox_events: %w", err)
	}
	if !hasOutbox {
		db.Close(ctx)
		return nil, nil
	}
	w := &apiWatch{rn: rn, db: db, committedEvents: `SELECT count(*) FROM payments`, outboxEvents: `SELECT count(*) FROM outbox_events`}
	if table, err := verify.PublishedEventsTable(ctx, db); err != nil {
		db.Close(ctx)
		return nil, err
	} else if table != "outbox_events" {
		w.outboxEvents = `SELECT (SELECT count(*) FROM outbox_events) + (SELECT count(*) FROM ` + table + `)`
	}
	var hasVersion bool
	err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('payments') AND attname = 'version' AND NOT attisdropped)`).Scan(&hasVersion)
	if err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("look up payments.version: %w", err)
	}
	if hasVersion {
		w.committedEvents = `SELECT coalesce(sum(version), 0) FROM payments`
	}
	return w, nil
}

// Close releases the connection.
func (w *apiWatch) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	w.db.Close(ctx)
}

// probeFor freezes the API at instants a millisecond apart, for up to d, and reports
// whether a freeze caught it with more payments committed than outbox rows: the API
// is then left frozen, for the kill. Otherwise it is thawed each time.
func (w *apiWatch) probeFor(ctx context.Context, d time.Duration) (caught bool, err error) {
	ticks := time.NewTicker(time.Millisecond)
	defer ticks.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-ticks.C:
		}
		if caught, err := w.probe(ctx); caught || err != nil {
			return caught, err
		}
	}
	return false, nil
}

// probe freezes the API and compares, in one snapshot, the committed events the payments
// table accounts for with the outbox rows. Each transition of a payment (its creation
// included) writes exactly one event row when both are written in one transaction, so
// more transitions than rows is a transition whose event is not written yet. Rows are
// never fewer for another reason during a run: cleanup removes only rows published
// longer ago than the run lasts.
// A caught API stays frozen; any other is thawed before probe returns.
func (w *apiWatch) probe(ctx context.Context) (caught bool, err error) {
	if err := w.rn.API.Freeze(); err != nil {
		return false, err
	}
	defer func() {
		if !caught {
			if thawErr := w.rn.API.Thaw(); thawErr != nil && err == nil {
				err = thawErr
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var committed, events int
	err = w.db.QueryRow(ctx, `SELECT (`+w.committedEvents+`), (`+w.outboxEvents+`)`).Scan(&committed, &events)
	if err != nil {
		return false, fmt.Errorf("count committed transitions and outbox rows: %w", err)
	}
	return committed > events, nil
}
