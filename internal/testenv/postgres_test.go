package testenv

import (
	"context"
	"testing"

	"github.com/dscourse/payments-outbox/migrations"
)

func TestNewPoolIsMigratedAndPrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := NewPool(t, migrations.Payments)
	b := NewPool(t, migrations.Payments)

	if _, err := a.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, created_at)
		VALUES (gen_random_uuid(), 'u1', 100, 'EUR', now())`); err != nil {
		t.Fatalf("insert into a fresh database: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	if n != 0 {
		t.Errorf("payments in another test's database = %d, want 0", n)
	}
}
