package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
)

// The values of RELAY_MODE.
const (
	relayModePoll = "poll"
	relayModeCDC  = "cdc"
)

// relayRunner is what serve needs from either relay: *poll.Relay and *cdc.Relay.
type relayRunner interface {
	Run(ctx context.Context) error
}

// relayNudges are the calls the handlers make to the relay. The polling relay wants
// both (a new row or a replayed one is work for an idle worker); the CDC relay needs
// none after a payment, since the stream brings every insert, but must hear of replays,
// which are updates the insert-only stream does not carry.
type relayNudges struct {
	created  func()
	replayed func()
}

// newRelay builds the relay RELAY_MODE chooses, and registers its metrics with reg.
// Both report under the same metric names.
func newRelay(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer) (relayRunner, relayNudges, error) {
	if cfg.RelayMode == relayModeCDC {
		metrics, err := cdc.NewMetrics(reg)
		if err != nil {
			return nil, relayNudges{}, err
		}
		relay, err := cdc.NewRelay(pool, cfg.cdcConfig(), logger, metrics)
		if err != nil {
			return nil, relayNudges{}, fmt.Errorf("new CDC relay: %w", err)
		}
		return relay, relayNudges{created: func() {}, replayed: relay.Replayed}, nil
	}
	metrics, err := poll.NewMetrics(reg)
	if err != nil {
		return nil, relayNudges{}, err
	}
	relay, err := poll.NewRelay(pool, cfg.Relay, logger, metrics)
	if err != nil {
		return nil, relayNudges{}, fmt.Errorf("new relay: %w", err)
	}
	return relay, relayNudges{created: relay.Notify, replayed: relay.Notify}, nil
}

// dropCDCSlot drops the CDC relay's slot when the API starts in polling mode: after a
// switch back from RELAY_MODE=cdc nobody reads it, and it would hold the server's WAL
// for ever (cdc.DropSlot). A slot a CDC relay still streams from (another replica, in
// the middle of a rolling switch) is left, with a warning; `api cdc drop-slot` drops it
// once that replica is gone, and OutboxReplicationSlotUnread fires meanwhile. Failing
// here does not stop the API: the polling relay needs no slot.
func dropCDCSlot(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger) {
	slot := cfg.cdcSlot()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dropped, err := cdc.DropSlot(ctx, pool, slot)
	switch {
	case errors.Is(err, cdc.ErrSlotInUse):
		logger.Warn("RELAY_MODE=poll, but a CDC relay still streams from its slot; drop it with `api cdc drop-slot` once that relay is stopped",
			slog.String("slot", slot))
	case err != nil:
		logger.Warn("drop the CDC relay's replication slot", slog.String("slot", slot), slog.Any("err", err))
	case dropped:
		logger.Info("dropped the CDC relay's replication slot: the relay polls now", slog.String("slot", slot))
	}
}

// cdcSlot is the CDC relay's slot name: RELAY_CDC_SLOT, or the default of the database.
func (c config) cdcSlot() string {
	return cmp.Or(c.CDCSlot, cdc.DefaultSlot(c.DatabaseURL))
}

// cdcConfig is the CDC relay's share of the RELAY_* settings: the ones that mean the
// same in both modes. Workers, lease, poll interval and shutdown grace have no CDC
// counterpart (one ordered stream, no claims, no polling, no lease to hand back).
func (c config) cdcConfig() cdc.Config {
	return cdc.Config{
		DatabaseURL:        c.DatabaseURL,
		Brokers:            c.Relay.Brokers,
		Topic:              c.Relay.Topic,
		ClientOpts:         c.Relay.ClientOpts,
		Slot:               c.CDCSlot,
		BatchSize:          c.Relay.BatchSize,
		PublishTimeout:     c.Relay.PublishTimeout,
		MaxRejections:      c.Relay.MaxRejections,
		OutageBackoffMax:   c.Relay.OutageBackoffMax,
		AlertWebhookURL:    c.Relay.AlertWebhookURL,
		AlertRoutingKey:    c.Relay.AlertRoutingKey,
		AlertSecret:        c.Relay.AlertSecret,
		AlertTimeout:       c.Relay.AlertTimeout,
		OldestPendingAlert: c.Relay.OldestPendingAlert,
		TracerProvider:     c.Relay.TracerProvider,
		// Fault injection for the clock-skew chaos scenario (docs/contract.md).
		FaultTimestampSkew: c.Relay.FaultTimestampSkew,
	}
}
