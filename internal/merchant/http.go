package merchant

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

// maxKeyLength bounds what is hashed and looked up: a real key is 30 bytes.
const maxKeyLength = 128

// An Authenticator finds the merchant of a live key, or answers ErrNoKey: a Store, or a
// KeyCache in front of one.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (uuid.UUID, error)
}

// RequireAPIKey returns a middleware that lets a request through only with
// "Authorization: Bearer <key>" of a live key (as keys, a Store or a KeyCache, says),
// with its merchant on the context (FromContext). Without one it calls unauthorized,
// which answers 401; a failure of the lookup itself goes to failed (503 or 500, the
// caller's error mapping).
func RequireAPIKey(keys Authenticator, unauthorized func(w http.ResponseWriter, r *http.Request), failed func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || key == "" || len(key) > maxKeyLength {
				unauthorized(w, r)
				return
			}
			id, err := keys.Authenticate(r.Context(), key)
			if errors.Is(err, ErrNoKey) {
				unauthorized(w, r)
				return
			}
			if err != nil {
				failed(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithID(r.Context(), id)))
		})
	}
}
