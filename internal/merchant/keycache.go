package merchant

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// KeyCacheConfig is how long and how many of the merchants' keys a KeyCache remembers.
type KeyCacheConfig struct {
	// TTL is how long a key's merchant is remembered after its lookup, and so how long
	// a revoked key keeps working on each API process that looked it up before the
	// revocation. Default 5 s (API_KEY_CACHE_TTL); zero turns the cache off.
	TTL time.Duration
	// MaxKeys bounds the memory: when that many keys are remembered, the cache forgets
	// them all and starts again. Default 10,000.
	MaxKeys int
}

// A KeyCache answers Authenticate from memory for a key that it looked up in its Store
// within TTL, so that a merchant's requests do not each cost a query for their key.
// Only live keys are remembered: an unknown or revoked key is looked up every time, so
// that a key just created works at once and a flood of made-up keys fills nothing.
// The cost is the staleness bound: a revoked key stops working within TTL, not at
// once.
type KeyCache struct {
	store *Store
	cfg   KeyCacheConfig
	// now is the clock; time.Now but in the package's tests.
	now func() time.Time

	mu   sync.Mutex
	keys map[[32]byte]cachedKey // by the key's hash: no key is kept in clear
}

type cachedKey struct {
	merchantID uuid.UUID
	lookedUp   time.Time
}

// NewKeyCache returns a KeyCache in front of store, with cfg's zero fields set to
// their defaults but TTL: zero there means no cache, every call goes to store.
func NewKeyCache(store *Store, cfg KeyCacheConfig) *KeyCache {
	cfg.MaxKeys = cmp.Or(cfg.MaxKeys, 10_000)
	return &KeyCache{store: store, cfg: cfg, now: time.Now, keys: map[[32]byte]cachedKey{}}
}

// Authenticate returns the merchant whose live key key is, or ErrNoKey, as
// Store.Authenticate does, from memory if key was found live within TTL.
func (c *KeyCache) Authenticate(ctx context.Context, key string) (uuid.UUID, error) {
	if c.cfg.TTL <= 0 {
		return c.store.Authenticate(ctx, key)
	}
	hash := [32]byte(hashKey(key))
	c.mu.Lock()
	k, ok := c.keys[hash]
	c.mu.Unlock()
	if ok && c.now().Sub(k.lookedUp) < c.cfg.TTL {
		return k.merchantID, nil
	}
	lookedUp := c.now() // before the query: the bound counts from what the query saw
	id, err := c.store.Authenticate(ctx, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.keys, hash)
		return uuid.Nil, err
	}
	if len(c.keys) >= c.cfg.MaxKeys {
		clear(c.keys)
	}
	c.keys[hash] = cachedKey{merchantID: id, lookedUp: lookedUp}
	return id, nil
}
