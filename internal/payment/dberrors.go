package payment

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// translate turns driver errors that mean "the database is not reachable right now"
// into an Unavailable *Error, which the API answers with 503 and Retry-After. Every
// other error is returned as is and becomes a 500.
//
// The distinction matters to clients: a 503 says "retry with the same
// Idempotency-Key", which is safe even when the failure hit during COMMIT and the
// payment did commit. The db-restart chaos scenario relies on it.
func translate(err error) error {
	if err == nil || !isUnavailable(err) {
		return err
	}
	return &Error{
		Code:    Unavailable,
		Message: "the payments database is unavailable; retry later with the same Idempotency-Key",
		err:     err,
	}
}

// isUnavailable reports whether err is a connection-level failure rather than a
// problem with the statement.
func isUnavailable(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case pgErr.Code[:2] == "08": // connection_exception
			return true
		case pgErr.Code == "57P01", // admin_shutdown: pg_ctl stop -m fast, pg_terminate_backend
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now: starting up or shutting down
			pgErr.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	// The server went away mid-conversation, or the connection was already closed,
	// or a query ran out of time (pgx reports the deadline as a timeout).
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	// pgx marks errors that happened before anything reached the server as safe to
	// retry: a closed or broken connection.
	return pgconn.SafeToRetry(err)
}
