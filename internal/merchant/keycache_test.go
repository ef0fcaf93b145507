package merchant

import (
	"errors"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// fakeClock is a KeyCache's clock that moves only when the test says.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// A revoked key keeps working from the cache for less than TTL after its last lookup,
// then stops; a key that was not live when looked up is never remembered.
func TestKeyCacheBoundsARevokedKeysLife(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	store := NewStore(pool)
	ctx := t.Context()
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	cache := NewKeyCache(store, KeyCacheConfig{TTL: 5 * time.Second})
	cache.now = clock.now

	k, err := store.CreateKey(ctx, "acme")
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	if got, err := cache.Authenticate(ctx, k.Key); err != nil || got != k.MerchantID {
		t.Fatalf("Authenticate(live key) = %s, %v; want %s", got, err, k.MerchantID)
	}
	if err := store.RevokeKey(ctx, k.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	clock.t = clock.t.Add(4 * time.Second)
	if got, err := cache.Authenticate(ctx, k.Key); err != nil || got != k.MerchantID {
		t.Errorf("Authenticate(revoked key, 4 s after its lookup) = %s, %v; want %s from the cache", got, err, k.MerchantID)
	}
	clock.t = clock.t.Add(time.Second)
	if _, err := cache.Authenticate(ctx, k.Key); !errors.Is(err, ErrNoKey) {
		t.Errorf("Authenticate(revoked key, 5 s after its lookup) error %v, want ErrNoKey", err)
	}
	// Still refused at once: a refusal is not remembered as a stale "live".
	if _, err := cache.Authenticate(ctx, k.Key); !errors.Is(err, ErrNoKey) {
		t.Errorf("Authenticate(revoked key, again) error %v, want ErrNoKey", err)
	}
	if n := len(cache.keys); n != 0 {
		t.Errorf("cache holds %d keys after the refusals, want 0", n)
	}
}

// With TTL zero every call is a lookup: a revocation counts at once.
func TestKeyCacheOffWithZeroTTL(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	store := NewStore(pool)
	ctx := t.Context()
	cache := NewKeyCache(store, KeyCacheConfig{})
	k, err := store.CreateKey(ctx, "acme")
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	if _, err := cache.Authenticate(ctx, k.Key); err != nil {
		t.Fatalf("Authenticate(live key): %v", err)
	}
	if err := store.RevokeKey(ctx, k.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := cache.Authenticate(ctx, k.Key); !errors.Is(err, ErrNoKey) {
		t.Errorf("Authenticate(revoked key, no cache) error %v, want ErrNoKey", err)
	}
}

// The cache never holds more than MaxKeys keys.
func TestKeyCacheIsBounded(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	store := NewStore(pool)
	ctx := t.Context()
	cache := NewKeyCache(store, KeyCacheConfig{TTL: time.Minute, MaxKeys: 2})
	for i := range 5 {
		k, err := store.CreateKey(ctx, "acme")
		if err != nil {
			t.Fatalf("create key %d: %v", i, err)
		}
		if _, err := cache.Authenticate(ctx, k.Key); err != nil {
			t.Fatalf("Authenticate(key %d): %v", i, err)
		}
		if n := len(cache.keys); n > 2 {
			t.Fatalf("after %d keys the cache holds %d, want at most 2", i+1, n)
		}
	}
}
