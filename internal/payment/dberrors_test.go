package payment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTranslateTellsUnavailableFromOtherFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, Unavailable},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, Unavailable},
		{"starting up", &pgconn.PgError{Code: "57P03"}, Unavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, Unavailable},
		{"connection failure", &pgconn.PgError{Code: "08006"}, Unavailable},
		{"connection dropped", fmt.Errorf("insert payment: %w", io.ErrUnexpectedEOF), Unavailable},
		{"conn closed", fmt.Errorf("commit: %w", pgconn.ErrConnClosed), Unavailable},
		{"deadline", fmt.Errorf("begin: %w", context.DeadlineExceeded), Unavailable},
		{"check violation", &pgconn.PgError{Code: "23514"}, Internal},
		{"raised exception", &pgconn.PgError{Code: "P0001"}, Internal},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, Internal},
		{"other", errors.New("boom"), Internal},
	}
	for _, tt := range tests {
		err := translate(fmt.Errorf("wrapped: %w", tt.err))
		got := Internal
		if e, ok := errors.AsType[*Error](err); ok {
			got = e.Code
		}
		if got != tt.want {
			t.Errorf("%s: code = %q, want %q", tt.name, got, tt.want)
		}
		// The cause stays reachable for logs and errors.Is.
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: translated error %v lost its cause", tt.name, err)
		}
	}
}
