package main

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
)

// dualWriteHandler builds the TEACHING-ONLY dual-write POST /payments handler (issue 5).
// Not built yet.
func dualWriteHandler(cfg config, pool *pgxpool.Pool, logger *slog.Logger) (http.Handler, error) {
	return nil, errors.New("dual-write mode is not built yet")
}
