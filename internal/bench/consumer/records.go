package consumer

// The records a drain consumes: PaymentCreated events of distinct payments, as the relay
// publishes them.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// benchUsers spreads the events over users so that velocity queries find history, as in
// production, without flagging everyone, and so that the instances of a group share
// users (their totals rows) across partitions.
const benchUsers = 5_000

// paymentRecords builds n PaymentCreated records of n distinct payments.
func paymentRecords(n int) []*kgo.Record {
	records := make([]*kgo.Record, n)
	start := time.Now().Add(-time.Hour).UTC()
	for i := range records {
		p := event.PaymentCreated{
			PaymentID: uuid.New(),
			UserID:    fmt.Sprintf("u-%d", i%benchUsers),
			Amount:    int64(100 + i%200_000),
			Currency:  "EUR",
			CreatedAt: start.Add(time.Duration(i) * 30 * time.Millisecond),
		}
		payload, _ := json.Marshal(p) // a struct of plain fields always encodes
		envelope := event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: payload}
		records[i] = envelope.Record("", time.Now())
	}
	return records
}

// freshCopies returns new records with the same key, value and headers: the client
// writes into a record it produces, so one record must not be produced twice.
func freshCopies(records []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(records))
	for i, r := range records {
		out[i] = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out
}

// produce writes the records asynchronously and waits for every ack.
func produce(ctx context.Context, client *kgo.Client, records []*kgo.Record) error {
	errs := make(chan error, 1)
	for _, r := range records {
		client.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := client.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	select {
	case err := <-errs:
		return fmt.Errorf("produce: %w", err)
	default:
		return nil
	}
}
