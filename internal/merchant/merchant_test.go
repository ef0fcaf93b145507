package merchant_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// A key authenticates its merchant until it is revoked; only its hash is stored.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	store := merchant.NewStore(pool)
	ctx := t.Context()

	a, err := store.CreateKey(ctx, "acme")
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	a2, err := store.CreateKey(ctx, "acme")
	if err != nil {
		t.Fatalf("create second key: %v", err)
	}
	if a2.MerchantID != a.MerchantID || a2.Key == a.Key || !strings.HasPrefix(a.Key, "pok_") || len(a.Key) < 30 {
		t.Errorf("keys %+v and %+v: want one merchant, two different pok_ keys of 30 characters", a, a2)
	}
	for _, k := range []merchant.NewKey{a, a2} {
		got, err := store.Authenticate(ctx, k.Key)
		if err != nil || got != k.MerchantID {
			t.Errorf("Authenticate(%s) = %s, %v; want %s", k.ID, got, err, k.MerchantID)
		}
	}
	var inClear int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE position($1::bytea IN key_hash) > 0`, []byte(a.Key)).Scan(&inClear); err != nil || inClear != 0 {
		t.Errorf("api_keys rows holding the key in clear: %d (%v), want 0", inClear, err)
	}

	if err := store.RevokeKey(ctx, a.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := store.Authenticate(ctx, a.Key); !errors.Is(err, merchant.ErrNoKey) {
		t.Errorf("Authenticate(revoked) error %v, want ErrNoKey", err)
	}
	if got, err := store.Authenticate(ctx, a2.Key); err != nil || got != a.MerchantID {
		t.Errorf("the merchant's other key after a revoke: %s, %v; want %s", got, err, a.MerchantID)
	}
	if _, err := store.Authenticate(ctx, "pok_"+strings.Repeat("A", 26)); !errors.Is(err, merchant.ErrNoKey) {
		t.Errorf("Authenticate(unknown) error %v, want ErrNoKey", err)
	}
	if err := store.RevokeKey(ctx, merchant.DefaultID); err == nil {
		t.Error("RevokeKey(unknown id) succeeded, want an error")
	}
}
