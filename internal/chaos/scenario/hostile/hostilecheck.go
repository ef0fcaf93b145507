package hostile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// validity gives the scenario's rows: that the harness wrote every hostile kind and
// some copies (from its own producer's acknowledgements), then its SLO rows, judged by
// their kind: what the consumer made of each record, by the positions they were
// written at.
func (h *hostileRecords) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	// The topic watch behind the notes counts every record with an X-Event-Id, so its
	// "events" and "written by the service itself" include the harness's own records.
	r.Notes = append(r.Notes, "the topic watch's counts include the harness's own records: "+h.summary()+
		"; the copies of decided events show there as the service's copies, and the verifier left all of them out")
	h.mu.Lock()
	kindsWritten, copies := 0, h.written[verify.CopyKind]
	for _, k := range hostileKinds {
		if h.written[k.kind] > 0 {
			kindsWritten++
		}
	}
	h.mu.Unlock()
	summary := h.summary()
	checks := []verdict.Check{
		verdict.NewCheck(verdict.Validity, "hostile records written by the harness (its producer's acks)",
			fmt.Sprintf("each of the %d kinds", len(hostileKinds)), fmt.Sprintf("%d kinds: %s", kindsWritten, summary), kindsWritten == len(hostileKinds)),
		verdict.NewCheck(verdict.Validity, "copies of decided events written with another payload (its producer's acks)", "> 0", copies, copies > 0),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return append(checks, h.consumerChecks(ctx, rn)...)
}

// consumerChecks are the SLO rows: every hostile record is in the consumer's
// consumer_dead_letters, and every copy was counted as a duplicate, neither
// dead-lettered nor decided. The table is our consumer's, so for a consumer without it
// both rows are off and the usual rows judge it alone (a hostile record decided is a
// phantom; a copy decided changes the user's totals).
func (h *hostileRecords) consumerChecks(ctx context.Context, rn *harness.Run) []verdict.Check {
	const lettersName = "hostile records in consumer_dead_letters (by the positions the harness wrote them at)"
	const copiesName = "copies of decided events counted as duplicates (not dead-lettered, not decided)"
	foreign := h.Foreign.Positions()
	hostile := 0
	for _, kind := range foreign {
		if kind != verify.CopyKind {
			hostile++
		}
	}
	lettersWant, copiesWant := fmt.Sprintf("%d of %d", hostile, hostile), "0 dead-lettered, 0 decisions from a copy"
	letters, err := harness.DeadLetters(ctx, rn)
	if err != nil {
		why := "the consumer keeps no consumer_dead_letters(topic, partition, offset) (the reference consumer's table): " + err.Error()
		return []verdict.Check{verdict.OffCheck(verdict.SLO, lettersName, lettersWant, why), verdict.OffCheck(verdict.SLO, copiesName, copiesWant, why)}
	}
	var missing []string
	lettered, copiesLettered := 0, 0
	for at, kind := range foreign {
		switch {
		case kind == verify.CopyKind && letters[at]:
			copiesLettered++
		case kind == verify.CopyKind:
		case letters[at]:
			lettered++
		default:
			missing = append(missing, fmt.Sprintf("%s at %s", kind, at))
		}
	}
	lettersGot := fmt.Sprintf("%d of %d", lettered, hostile)
	if len(missing) > 0 {
		slices.Sort(missing)
		lettersGot += "; not dead-lettered: " + strings.Join(missing[:min(3, len(missing))], ", ")
		if len(missing) > 3 {
			lettersGot += fmt.Sprintf(" and %d more", len(missing)-3)
		}
	}
	decidedFromCopy, err := decisionsOfUser(ctx, rn, duplicateUserID)
	copiesGot := fmt.Sprintf("%d dead-lettered, %d decisions from a copy", copiesLettered, decidedFromCopy)
	if err != nil {
		// decisions.user_id is ours, not the contract's: the duplicate effects row
		// still sees a copy decided, as totals that differ.
		copiesGot = fmt.Sprintf("%d dead-lettered; decisions from a copy not read (%v)", copiesLettered, err)
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.SLO, lettersName, lettersWant, lettersGot, lettered == hostile),
		verdict.NewCheck(verdict.SLO, copiesName, copiesWant, copiesGot, copiesLettered == 0 && decidedFromCopy == 0),
	}
}

// decisionsOfUser counts the decisions made for userID.
func decisionsOfUser(ctx context.Context, rn *harness.Run, userID string) (int, error) {
	conn, err := pgx.Connect(ctx, rn.ConsumerDB)
	if err != nil {
		return 0, fmt.Errorf("connect to the consumer database: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM decisions WHERE user_id::text = $1`, userID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count decisions of %s: %w", userID, err)
	}
	return n, nil
}
