package payment

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// Deps are what the payment routes need.
type Deps struct {
	// Logger receives internal errors; required.
	Logger *slog.Logger
	// Store reads and writes payments; required.
	Store *Store
	// Notify, if not nil, is called after a payment commits: the relay passes its
	// in-process wake-up so that the event is published without waiting for a poll.
	// It must not block.
	Notify func()
	// CreateHandler, if not nil, serves POST /payments instead of the outbox handler.
	// Only the teaching dual-write mode (cmd/api, DUAL_WRITE=true) sets it.
	CreateHandler http.Handler
}

// Routes adds the payment endpoints to r:
//
//	POST /payments       create a payment and its event (Idempotency-Key supported)
//	GET  /payments/{id}  the payment and the delivery state of its event
func Routes(r chi.Router, d Deps) {
	create := d.CreateHandler
	if create == nil {
		create = handleCreate(d.Logger, d.Store, d.Notify)
	}
	r.Method(http.MethodPost, "/payments", create)
	r.Method(http.MethodGet, "/payments/{id}", handleGet(d.Logger, d.Store))
}
