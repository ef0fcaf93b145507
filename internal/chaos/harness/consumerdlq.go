package harness

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// consumerDeadLettersName is the SLO row every scenario has about the consumer's dead
// letters.
const consumerDeadLettersName = "records the consumer dead-lettered, except the hostile records the harness wrote (consumer_dead_letters)"

// consumerDeadLettersCheck counts the records of the run's topic in the consumer's
// consumer_dead_letters other than the hostile records the harness wrote itself
// (Scenario.Foreign, hostile-records): the service's own events are valid, so a dead
// letter of one is a decision lost to a fault of the consumer's, such as a batch
// dead-lettered because its database failed it. Off without a consumer database or
// without the table, which is the reference consumer's, not the contract's.
func consumerDeadLettersCheck(rn *Run, foreign *verify.ForeignRecords) verdict.Check {
	const want = "0"
	if rn == nil || rn.ConsumerDB == "" {
		return verdict.OffCheck(verdict.SLO, consumerDeadLettersName, want, "no consumer database given")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	letters, err := DeadLetters(ctx, rn)
	if err != nil {
		return verdict.OffCheck(verdict.SLO, consumerDeadLettersName, want, "the consumer keeps no consumer_dead_letters(topic, partition, offset) (the reference consumer's table): "+err.Error())
	}
	var hostile map[verify.RecordPosition]string
	if foreign != nil {
		hostile = foreign.Positions()
	}
	var own []verify.RecordPosition
	for at := range letters {
		if kind, ok := hostile[at]; !ok || kind == verify.CopyKind {
			own = append(own, at)
		}
	}
	got := fmt.Sprintf("%d (%d dead letters in all)", len(own), len(letters))
	if len(own) > 0 {
		slices.SortFunc(own, func(a, b verify.RecordPosition) int {
			return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
		})
		got += "; first at " + own[0].String()
	}
	return verdict.NewCheck(verdict.SLO, consumerDeadLettersName, want, got, len(own) == 0)
}

// DeadLetters returns the positions of the run's topic that the consumer dead-lettered.
func DeadLetters(ctx context.Context, rn *Run) (map[verify.RecordPosition]bool, error) {
	conn, err := pgx.Connect(ctx, rn.ConsumerDB)
	if err != nil {
		return nil, fmt.Errorf("connect to the consumer database: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT partition::int, "offset"::bigint FROM consumer_dead_letters WHERE topic = $1`, rn.Topic)
	if err != nil {
		return nil, fmt.Errorf("read consumer_dead_letters: %w", err)
	}
	letters := map[verify.RecordPosition]bool{}
	var at verify.RecordPosition
	_, err = pgx.ForEachRow(rows, []any{&at.Partition, &at.Offset}, func() error {
		letters[at] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read consumer_dead_letters: %w", err)
	}
	return letters, nil
}
