// Package merchant is who a request acts for: the merchants, their API keys, and the
// middleware that turns "Authorization: Bearer <key>" into a merchant id on the
// request's context, which the payment handlers scope every query by.
package merchant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// keyPrefix marks the project's API keys, so that one pasted where it should not be
// (a log, a repository) is recognisable and can be searched for.
const keyPrefix = "pok_"

// queryTimeout bounds each query of the Store.
const queryTimeout = 5 * time.Second

// DefaultID is the merchant that migration 00011 creates for the payments written
// before merchants existed (and for writers that name none).
var DefaultID = uuid.MustParse("00000000-0000-0000-0000-000000000001")

// ErrNoKey is Authenticate's answer for a key that does not exist or was revoked.
var ErrNoKey = errors.New("no such API key, or revoked")

// A Store keeps merchants and their API keys in the payments database.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool, whose database has the payments migrations.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// A NewKey is a key just created: Key is its only appearance in clear.
type NewKey struct {
	ID         uuid.UUID `json:"key_id"`
	MerchantID uuid.UUID `json:"merchant_id"`
	Merchant   string    `json:"merchant"`
	Key        string    `json:"api_key"`
}

// CreateKey creates an API key for the merchant called name, creating the merchant
// if it does not exist yet. The key is 130 random bits (crypto/rand); only its hash is
// stored.
func (s *Store) CreateKey(ctx context.Context, name string) (NewKey, error) {
	if name == "" || len(name) > 64 {
		return NewKey{}, fmt.Errorf("merchant name %q: use 1 to 64 characters", name)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	k := NewKey{ID: uuid.New(), Merchant: name, Key: keyPrefix + rand.Text()}
	// One statement: the merchant exists, and has the key, or neither changed.
	err := s.pool.QueryRow(ctx, `
		WITH m AS (
			INSERT INTO merchants (id, name) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
			RETURNING id
		)
		INSERT INTO api_keys (id, merchant_id, key_hash)
		SELECT $3, m.id, $4 FROM m
		RETURNING merchant_id`,
		uuid.New(), name, k.ID, hashKey(k.Key)).Scan(&k.MerchantID)
	if err != nil {
		return NewKey{}, fmt.Errorf("create API key: %w", err)
	}
	return k, nil
}

// RevokeKey revokes the key with id: from now on it authenticates nothing. Revoking a
// revoked key is not an error; an unknown id is.
func (s *Store) RevokeKey(ctx context.Context, id uuid.UUID) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke API key %s: no such key", id)
	}
	return nil
}

// Authenticate returns the merchant whose live key key is, or ErrNoKey.
func (s *Store) Authenticate(ctx context.Context, key string) (uuid.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var merchantID uuid.UUID
	err := s.pool.QueryRow(ctx, `SELECT merchant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`,
		hashKey(key)).Scan(&merchantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrNoKey
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("look up API key: %w", err)
	}
	return merchantID, nil
}

// hashKey is what is stored of a key. The lookup is by this hash, so the time it takes
// tells an attacker nothing about the stored keys' bytes.
func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

type contextKey struct{}

// WithID returns ctx acting for merchant id.
func WithID(ctx context.Context, id uuid.UUID) context.Context {
	return context.WithValue(ctx, contextKey{}, id)
}

// FromContext returns the merchant the request acts for; ok is false when no
// middleware authenticated it.
func FromContext(ctx context.Context) (id uuid.UUID, ok bool) {
	id, ok = ctx.Value(contextKey{}).(uuid.UUID)
	return id, ok
}
