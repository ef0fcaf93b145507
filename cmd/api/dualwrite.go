package main

import (
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/dualwrite"
)

// dualWriteHandler builds the POST /payments handler of DUAL_WRITE=true: the dual-write
// ANTI-PATTERN, kept for teaching (make chaos SCENARIO=dual-write shows it losing
// events). It commits the payment without an outbox row and publishes to Kafka from the
// request; it is the only path to Kafka outside the outbox.
//
// The returned close function closes the handler's Kafka client; run calls it after the
// HTTP server has stopped.
func dualWriteHandler(cfg config, pool *pgxpool.Pool, logger *slog.Logger) (http.Handler, func(), error) {
	h, err := dualwrite.NewHandler(dualwrite.Config{Brokers: cfg.KafkaBrokers, Topic: cfg.KafkaTopic}, pool, logger)
	if err != nil {
		return nil, nil, err
	}
	return h, h.Close, nil
}
