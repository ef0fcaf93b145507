package poll

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// startPublishSpans opens a producer span for each event whose writer traced it, as a
// child of the writer's span (the traceparent stored with the row), and puts the
// span's own traceparent in the record's headers, so the consumer continues from this
// publish (delivery.StartPublishSpan). Each attempt is a span: an event published again
// after a lost ack shows as a second publish in the same trace, numbered by
// outbox.attempt. Events without a traceparent get neither.
func (r *Relay) startPublishSpans(records []*kgo.Record, eventOf map[*kgo.Record]claimedEvent) delivery.PublishSpans {
	tracer := r.cfg.TracerProvider.Tracer(delivery.TracerName)
	spans := delivery.PublishSpans{}
	for _, rec := range records {
		e := eventOf[rec]
		spans.Start(tracer, r.cfg.Topic, rec, e.ID, e.Traceparent,
			attribute.Int("outbox.attempt", e.Attempts+e.Rejections+1))
	}
	return spans
}
