package payment

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/merchant"
)

// paymentJSON is a payment on the wire.
type paymentJSON struct {
	ID             uuid.UUID  `json:"id"`
	UserID         string     `json:"user_id"`
	Amount         int64      `json:"amount"`
	Currency       string     `json:"currency"`
	CreatedAt      time.Time  `json:"created_at"`
	Status         string     `json:"status"`
	Version        int        `json:"version"`
	RefundedAmount int64      `json:"refunded_amount"`
	UpdatedAt      *time.Time `json:"updated_at,omitempty"`
	// EventID is the event of the request just answered (creation or transition).
	EventID *uuid.UUID `json:"event_id,omitempty"`
	// Event is the PaymentCreated event's delivery state, Events every event's; GET only.
	Event  *eventJSON  `json:"event,omitempty"`
	Events []eventJSON `json:"events,omitempty"`
}

// eventJSON is the delivery state of one of a payment's events, in GET /payments/{id}.
type eventJSON struct {
	ID          uuid.UUID  `json:"id"`
	Type        string     `json:"type"`
	Sequence    int        `json:"sequence"`
	Status      string     `json:"status"`
	Attempts    int        `json:"attempts"`
	PublishedAt *time.Time `json:"published_at"`
	LastError   *string    `json:"last_error"`
}

func toJSON(p Payment) paymentJSON {
	return paymentJSON{
		ID: p.ID, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency, CreatedAt: p.CreatedAt,
		Status: p.Status, Version: p.Version, RefundedAmount: p.RefundedAmount, UpdatedAt: p.UpdatedAt,
	}
}

func toEventJSON(e EventDelivery) eventJSON {
	return eventJSON{
		ID: e.ID, Type: e.Type, Sequence: e.Sequence, Status: e.Status, Attempts: e.Attempts,
		PublishedAt: e.PublishedAt, LastError: e.LastError,
	}
}

// retryAfterSeconds is what a 503 asks clients to wait: about the time a PostgreSQL
// restart or failover takes.
const retryAfterSeconds = "2"

// inFlightRetryAfterSeconds is what a 409 in_flight asks clients to wait: a request
// holds its key for one transaction, bounded by transactionTimeout and usually a few
// milliseconds.
const inFlightRetryAfterSeconds = "1"

// HandleCreate serves POST /payments: it writes the payment and its PaymentCreated
// event in one transaction (Store.Create) and answers 201, or replays the first answer
// for a repeated Idempotency-Key. notify, if not nil, is called after a new payment
// commits: cmd/api passes the relay's Relay.Notify, so that the event is published
// without waiting for the relay's next poll. It must not block.
func HandleCreate(logger *slog.Logger, store *Store, notify func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		merchantID, err := requestMerchant(r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		key, err := idempotencyKey(r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		req, err := DecodeCreateRequest(w, r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		created, err := store.Create(r.Context(), merchantID, req, key)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		if created.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		} else if notify != nil {
			// The event is committed: nudge the relay so it does not wait for its poll.
			notify()
		}
		body := toJSON(created.Payment)
		if created.EventID != uuid.Nil {
			body.EventID = &created.EventID
		}
		w.Header().Set("Location", "/payments/"+created.Payment.ID.String())
		Encode(w, r, logger, http.StatusCreated, body)
	})
}

// HandleGet serves GET /payments/{id}: the payment and the delivery state of its event.
// The router must set the path value "id" (chi and http.ServeMux both do).
func HandleGet(logger *slog.Logger, store *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		merchantID, err := requestMerchant(r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			WriteError(w, r, logger, Errorf(Invalid, "id", "payment id must be a UUID, got %q", r.PathValue("id")))
			return
		}
		p, events, err := store.Get(r.Context(), merchantID, id)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		body := toJSON(p)
		for _, e := range events {
			body.Events = append(body.Events, toEventJSON(e))
		}
		if created := CreatedEvent(events); created != nil {
			e := toEventJSON(*created)
			body.Event = &e
		}
		Encode(w, r, logger, http.StatusOK, body)
	})
}

// HandleTransition serves POST /payments/{id}/capture, /refund and /cancel (action is
// ActionCapture, ActionRefund or ActionCancel): it updates the payment and inserts the
// transition's event in one transaction (Store.Transition) and answers 200 with the
// payment after it, or replays for a repeated Idempotency-Key. notify is as for
// HandleCreate.
func HandleTransition(logger *slog.Logger, store *Store, action string, notify func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		merchantID, err := requestMerchant(r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			WriteError(w, r, logger, Errorf(Invalid, "id", "payment id must be a UUID, got %q", r.PathValue("id")))
			return
		}
		key, err := idempotencyKey(r)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		req, err := DecodeTransitionRequest(w, r, id, action)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		req.MerchantID = merchantID
		done, err := store.Transition(r.Context(), req, key)
		if err != nil {
			WriteError(w, r, logger, err)
			return
		}
		if done.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		} else if notify != nil {
			notify()
		}
		body := toJSON(done.Payment)
		body.EventID = &done.EventID
		Encode(w, r, logger, http.StatusOK, body)
	})
}

// requestMerchant is the merchant the request acts for, which merchant.RequireAPIKey
// put on its context. Its absence is a wiring mistake (a route without the
// middleware), answered as an internal error rather than served unscoped.
func requestMerchant(r *http.Request) (uuid.UUID, error) {
	id, ok := merchant.FromContext(r.Context())
	if !ok {
		return uuid.Nil, errors.New("no merchant on the request: the route lacks merchant.RequireAPIKey")
	}
	return id, nil
}

// Encode writes v as the JSON response with the given status.
func Encode(w http.ResponseWriter, r *http.Request, logger *slog.Logger, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The status line is gone already; all we can do is record it.
		logger.LogAttrs(r.Context(), slog.LevelWarn, "write response",
			slog.String("path", r.URL.Path), slog.Any("err", err))
	}
}

// errorJSON is the body of every error response.
type errorJSON struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// WriteError answers with err. An *Error is shown as it is; anything else is logged
// and the client only learns "internal error": no SQL, no stack trace.
func WriteError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	e, ok := errors.AsType[*Error](err)
	switch {
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer and nobody needs to act.
		logger.LogAttrs(r.Context(), slog.LevelInfo, "request canceled by client",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
		e = &Error{Code: Unavailable, Message: "request canceled"}
	case !ok:
		logger.LogAttrs(r.Context(), slog.LevelError, "internal error",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
		e = &Error{Code: Internal, Message: "internal error"}
	case e.Code == Unavailable:
		// Worth a warning, not an error: the database is restarting or unreachable (or,
		// for /readyz, the relay has stopped) and the client was told to retry. An alert
		// on 503 rates is the place to act.
		logger.LogAttrs(r.Context(), slog.LevelWarn, "service unavailable",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("reason", e.Message), slog.Any("err", err))
	}
	switch e.Code {
	case Unavailable:
		w.Header().Set("Retry-After", retryAfterSeconds)
	case InFlight:
		w.Header().Set("Retry-After", inFlightRetryAfterSeconds)
	case Unauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="payments"`)
	}
	Encode(w, r, logger, StatusCode(e.Code), errorJSON{Error: errorDetail{Code: e.Code, Message: e.Message, Field: e.Field}})
}
