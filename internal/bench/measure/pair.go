package measure

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/migrations"
)

// Pair is the two relays that the cdc and scale benchmarks compare: the polling relay
// with 4 workers claiming batches of 1000, and the CDC relay.
type Pair struct {
	Poll PollRelay
	CDC  CDCRelay
}

// NewPair returns the pair publishing to brokers, with their logs discarded.
func NewPair(brokers []string) Pair {
	logger := slog.New(slog.DiscardHandler)
	return Pair{
		Poll: PollRelay{Config: poll.Config{Brokers: brokers, Workers: 4, BatchSize: 1000}, Logger: logger},
		CDC:  CDCRelay{Brokers: brokers, Logger: logger},
	}
}

// PairDatabases creates a migrated database for each relay of a Pair, prefix_poll_<random>
// and prefix_cdc_<random>, so that the CDC relay's slot and its marks never meet the
// polling relay's rows. The returned function drops the CDC relay's slot, then both
// databases (PostgreSQL refuses to drop a database a slot uses); a slot it cannot drop
// is reported to warn, since the run's figures stand all the same.
func (b Bench) PairDatabases(ctx context.Context, prefix string, warn io.Writer) (pollURL, cdcURL string, drop func(), err error) {
	pollURL, dropPoll, err := b.MigratedDatabase(ctx, prefix+"_poll", migrations.Payments)
	if err != nil {
		return "", "", nil, err
	}
	cdcURL, dropCDC, err := b.MigratedDatabase(ctx, prefix+"_cdc", migrations.Payments)
	if err != nil {
		dropPoll()
		return "", "", nil, err
	}
	drop = func() {
		if err := DropSlot(context.WithoutCancel(ctx), b.Admin, cdcURL); err != nil {
			fmt.Fprintln(warn, "warning:", err)
		}
		dropCDC()
		dropPoll()
	}
	return pollURL, cdcURL, drop, nil
}
