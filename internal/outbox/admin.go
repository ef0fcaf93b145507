package outbox

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

// newAdminHandler serves the operator endpoints, under their full paths:
//
//	GET  /admin/dlq                      the dead letters, newest first
//	POST /admin/dlq/{event_id}/replay    send a dead letter back for delivery
//
// Every request needs "Authorization: Bearer <token>". With no token configured the
// endpoints do not exist (404): an unprotected replay button is worse than none.
func newAdminHandler(s store, token string, logger *slog.Logger, notify func()) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /admin/dlq", handleListDLQ(s, logger))
	mux.Handle("POST /admin/dlq/{event_id}/replay", handleReplay(s, logger, notify))
	return requireToken(token, mux)
}

func requireToken(token string, next http.Handler) http.Handler {
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

func handleListDLQ(s store, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dead, err := s.listDeadLetters(r.Context(), 1000)
		if err != nil {
			logger.Error("admin: list dead letters", "err", err)
			writeJSON(w, http.StatusInternalServerError, errorBody("internal", "internal error"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"dead_letters": append([]DeadLetter{}, dead...)})
	})
}

func handleReplay(s store, logger *slog.Logger, notify func()) http.Handler {
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
			logger.Error("admin: replay", "event_id", id, "err", err)
			writeJSON(w, http.StatusInternalServerError, errorBody("internal", "internal error"))
			return
		}
		logger.Info("dead letter replayed", "event_id", id)
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
