package outbox

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DLQ is the operator's view of the dead-letter queue: the events the broker rejected
// too often, which wait there, holding back their aggregate's later events, until
// someone fixes the cause and replays them. cmd/api mounts its endpoints, behind
// RequireBearerToken, on these paths:
//
//	GET  /admin/dlq                      HandleList: the dead letters, newest first
//	POST /admin/dlq/{event_id}/replay    HandleReplay: send a dead letter back for delivery
type DLQ struct {
	store  store
	logger *slog.Logger
}

// NewDLQ returns the dead-letter queue of the outbox in pool; its handlers log
// internal errors on logger.
func NewDLQ(pool *pgxpool.Pool, logger *slog.Logger) *DLQ {
	return &DLQ{store: store{pool: pool}, logger: logger}
}

// maxListedDeadLetters bounds GET /admin/dlq: the DLQ is for a handful of poison
// events, and a thousand is already an incident to handle in SQL.
const maxListedDeadLetters = 1000

// RequireBearerToken returns a middleware that lets a request through only with
// "Authorization: Bearer <token>", answering 401 otherwise. The comparison takes the
// same time whatever the guess, so the token cannot be found byte by byte.
//
// An empty token answers 404 to everything: cmd/api does not mount the endpoints then,
// and this is the backstop should someone mount them anyway, because an empty token
// would otherwise match "Authorization: Bearer " and an unprotected replay button is
// worse than none.
func RequireBearerToken(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if token == "" {
				http.NotFound(w, r)
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="admin"`)
				writeJSON(w, http.StatusUnauthorized, errorBody("unauthorized", "a valid admin bearer token is required"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// HandleList serves GET /admin/dlq: the dead letters, newest first.
func (q *DLQ) HandleList() http.Handler {
	s, logger := q.store, q.logger
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dead, err := s.listDeadLetters(r.Context(), maxListedDeadLetters)
		if err != nil {
			logger.LogAttrs(r.Context(), slog.LevelError, "admin: list dead letters", slog.Any("err", err))
			writeJSON(w, http.StatusInternalServerError, errorBody("internal", "internal error"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"dead_letters": append([]DeadLetter{}, dead...)})
	})
}

// HandleReplay serves POST /admin/dlq/{event_id}/replay: the failed event becomes
// pending again, keeps its id (consumers deduplicate on it) and its place before its
// aggregate's successors. notify, which must not block, wakes the relay so that the
// replay is published now rather than at the next poll (poll.Relay.Notify, or
// cdc.Relay.Replayed).
func (q *DLQ) HandleReplay(notify func()) http.Handler {
	s, logger := q.store, q.logger
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("event_id"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody("invalid", "event_id must be a UUID"))
			return
		}
		switch err := s.replay(r.Context(), id); {
		case errors.Is(err, errNotDeadLettered):
			writeJSON(w, http.StatusNotFound, errorBody("not_found", "no failed event with this id"))
			return
		case err != nil:
			logger.LogAttrs(r.Context(), slog.LevelError, "admin: replay",
				slog.String("event_id", id.String()), slog.Any("err", err))
			writeJSON(w, http.StatusInternalServerError, errorBody("internal", "internal error"))
			return
		}
		logger.LogAttrs(r.Context(), slog.LevelInfo, "dead letter replayed", slog.String("event_id", id.String()))
		notify()
		writeJSON(w, http.StatusOK, map[string]any{"event_id": id, "status": "pending"})
	})
}

func errorBody(code, message string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": message}}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body) // the client went away; nothing to do
}
