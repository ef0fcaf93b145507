package antifraud

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/event"
)

// The running totals (user_totals) are the effect that is not idempotent: each applied
// event moves its user's row once, in the transaction that inserted its dedup row. They
// are also the rows that transactions share: every payment of a user updates the same
// row, and two consumers of one group (or the slices of a poll, slice.go, for a payment
// whose events disagree on the user) may update it at once. Each transaction therefore
// takes the rows in one fixed order, the key's, so that two of them never wait for each
// other in a cycle. A deadlock would cost nothing but a retried batch, yet under load it
// would recur every time two batches share users.

// moveTotals applies what the applied events change in their users' totals: a creation
// adds its payment, a refund takes its amount off, a cancellation the whole payment; a
// capture changes nothing. The caller passes only events applied for the first time.
func moveTotals(ctx context.Context, tx pgx.Tx, applied []paymentEvent) error {
	var added, taken []Payment // taken: Amount is what leaves the total, ID unused
	var cancelled []int64      // per taken payment, the count that leaves the total
	for _, ev := range applied {
		p := Payment{UserID: ev.payload.UserID, Currency: ev.payload.Currency, Amount: ev.payload.Amount}
		switch ev.typ {
		case event.TypePaymentCreated:
			added = append(added, p)
		case event.TypePaymentCancelled:
			taken, cancelled = append(taken, p), append(cancelled, 1)
		case event.TypePaymentRefunded:
			taken, cancelled = append(taken, p), append(cancelled, 0)
		}
	}
	if len(taken) > 0 {
		// addToTotals and subtractFromTotals each take their rows in key order, but one
		// after the other they would not: lock every row first, in one ordered pass.
		if err := lockTotals(ctx, tx, append(added, taken...)); err != nil {
			return err
		}
	}
	if len(added) > 0 {
		if err := addToTotals(ctx, tx, added); err != nil {
			return err
		}
	}
	if len(taken) > 0 {
		return subtractFromTotals(ctx, tx, taken, cancelled)
	}
	return nil
}

// lockTotals locks the existing totals rows of the payments' users, in key order. A row
// that does not exist yet is locked by the insert that creates it, in addToTotals' order.
func lockTotals(ctx context.Context, tx pgx.Tx, payments []Payment) error {
	users, currencies := make([]string, len(payments)), make([]string, len(payments))
	for i, p := range payments {
		users[i], currencies[i] = p.UserID, p.Currency
	}
	_, err := tx.Exec(ctx, `
		SELECT 1 FROM user_totals t
		WHERE (t.user_id, t.currency) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY t.user_id, t.currency
		FOR UPDATE`,
		users, currencies)
	if err != nil {
		return fmt.Errorf("lock user totals: %w", err)
	}
	return nil
}

// addToTotals adds each payment to its user's running total in its currency. It is NOT
// idempotent, on purpose (see migrations/antifraud/00002_user_totals.sql): the caller must
// pass only events seen for the first time, in the transaction that inserted their dedup
// rows. The payments are grouped in SQL, where sum(bigint) is numeric and cannot
// overflow, because one statement must not upsert the same key twice; rows are taken in
// key order, the columns' collation "C" (lockTotals' order).
func addToTotals(ctx context.Context, tx pgx.Tx, payments []Payment) error {
	n := len(payments)
	users, currencies, amounts := make([]string, n), make([]string, n), make([]int64, n)
	for i, p := range payments {
		users[i], currencies[i], amounts[i] = p.UserID, p.Currency, p.Amount
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO user_totals (user_id, currency, payment_count, amount_total)
		SELECT p.user_id COLLATE "C", p.currency COLLATE "C", count(*), sum(p.amount)
		FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(user_id, currency, amount)
		GROUP BY 1, 2
		ORDER BY 1, 2
		ON CONFLICT (user_id, currency) DO UPDATE
		SET payment_count = user_totals.payment_count + excluded.payment_count,
		    amount_total  = user_totals.amount_total + excluded.amount_total,
		    updated_at    = now()`,
		users, currencies, amounts)
	if err != nil {
		return fmt.Errorf("add to user totals: %w", err)
	}
	return nil
}

// subtractFromTotals takes payments[i].Amount and counts[i] payments off each user's
// total, grouped in SQL so that one statement updates each row once. The row exists: the
// order check let the event through only after its payment's creation, which
// addToTotals counted. An UPDATE rather than addToTotals' upsert, because an upsert
// checks the row it would insert, and a negative total breaks the CHECK before the
// conflict is seen. A total that would go below zero breaks the table's CHECK, and
// isolate.go dead-letters the event that did it. The rows are locked already
// (lockTotals), so the order in which this statement visits them does not matter.
func subtractFromTotals(ctx context.Context, tx pgx.Tx, payments []Payment, counts []int64) error {
	n := len(payments)
	users, currencies, amounts := make([]string, n), make([]string, n), make([]int64, n)
	for i, p := range payments {
		users[i], currencies[i], amounts[i] = p.UserID, p.Currency, p.Amount
	}
	_, err := tx.Exec(ctx, `
		UPDATE user_totals t
		SET payment_count = t.payment_count - d.count,
		    amount_total  = t.amount_total - d.amount,
		    updated_at    = now()
		FROM (
			SELECT p.user_id, p.currency, sum(p.count) AS count, sum(p.amount) AS amount
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS p(user_id, currency, count, amount)
			GROUP BY p.user_id, p.currency
		) d
		WHERE t.user_id = d.user_id AND t.currency = d.currency`,
		users, currencies, counts, amounts)
	if err != nil {
		return fmt.Errorf("subtract from user totals: %w", err)
	}
	return nil
}
