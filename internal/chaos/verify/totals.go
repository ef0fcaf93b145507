package verify

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// The running-totals check: the consumer's one effect that a redelivery would change.
// decisions cannot show a missing dedup (a primary key on the payment absorbs a second
// decision whatever the consumer does), but a per-user running total counted twice stays
// counted twice. The verifier recomputes the totals from the committed payments and
// compares them, exactly, with the consumer's user_totals table.

// A UserCurrency names one user's running total in one currency.
type UserCurrency struct {
	UserID   string
	Currency string
}

// A RunningTotal is a payment count and the sum of the amounts, in minor units. The sum
// is decimal text, as PostgreSQL prints it, so that sums beyond 64 bits compare exactly
// whatever the column's type.
type RunningTotal struct {
	Payments int64
	Amount   string
}

// IsZero reports whether t counts nothing: a missing row and a row of zeros are the same
// total.
func (t RunningTotal) IsZero() bool { return t.Payments == 0 && (t.Amount == "0" || t.Amount == "") }

// totals reads the consumer's user_totals and computes what they should be: the totals of
// the committed payments that have a decision; with the lifecycle (lifecycle true), a
// cancelled payment counts for nothing and a refunded one for what was not refunded. Payments without one are already counted
// as lost, and would otherwise be reported a second time here. The decisions and the
// totals are read in one snapshot, so that a consumer still at work cannot make them
// disagree. The caller has checked that the table exists (Schema.UserTotals).
func (v *Verifier) totals(ctx context.Context, committed map[string]PaymentFields, lifecycle bool) (want, got map[UserCurrency]RunningTotal, err error) {
	tx, err := v.consumer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("read the consumer's totals: %w", err)
	}
	defer tx.Rollback(ctx) // read only: nothing to commit
	rows, err := tx.Query(ctx, `SELECT payment_id::text FROM decisions`)
	if err != nil {
		return nil, nil, fmt.Errorf("read decided payments: %w", err)
	}
	decided, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("read decided payments: %w", err)
	}
	decided = slices.DeleteFunc(decided, func(id string) bool {
		_, ok := committed[id]
		return !ok
	})
	// trim_scale: a numeric(20,2) column prints 1999.00 for a sum of 1999.
	rows, err = tx.Query(ctx, `
		SELECT user_id, currency::text, payment_count, trim_scale(amount_total::numeric)::text
		FROM user_totals`)
	if err != nil {
		return nil, nil, fmt.Errorf("read the consumer's user_totals: %w", err)
	}
	if got, err = collectTotals(rows); err != nil {
		return nil, nil, fmt.Errorf("read the consumer's user_totals: %w", err)
	}

	query := `
		SELECT user_id, currency::text, count(*), trim_scale(sum(amount))::text
		FROM payments WHERE id = ANY($1::text[]::uuid[])
		GROUP BY 1, 2`
	if lifecycle {
		query = `
		SELECT user_id, currency::text, count(*) FILTER (WHERE status <> 'cancelled'),
		       trim_scale(coalesce(sum(amount - refunded_amount) FILTER (WHERE status <> 'cancelled'), 0))::text
		FROM payments WHERE id = ANY($1::text[]::uuid[])
		GROUP BY 1, 2`
	}
	rows, err = v.payments.Query(ctx, query, decided)
	if err != nil {
		return nil, nil, fmt.Errorf("compute the totals of the committed payments: %w", err)
	}
	if want, err = collectTotals(rows); err != nil {
		return nil, nil, fmt.Errorf("compute the totals of the committed payments: %w", err)
	}
	return want, got, nil
}

// collectTotals reads rows of user id, currency, payment count and amount.
func collectTotals(rows pgx.Rows) (map[UserCurrency]RunningTotal, error) {
	totals := map[UserCurrency]RunningTotal{}
	var k UserCurrency
	var t RunningTotal
	_, err := pgx.ForEachRow(rows, []any{&k.UserID, &k.Currency, &t.Payments, &t.Amount}, func() error {
		totals[k] = t
		return nil
	})
	return totals, err
}
