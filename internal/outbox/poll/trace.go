package poll

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// publishSpans are the open spans of one publish attempt, by record.
type publishSpans map[*kgo.Record]trace.Span

// startPublishSpans opens a producer span for each event whose writer traced it, as a
// child of the writer's span (the traceparent stored with the row), and puts the
// span's own traceparent in the record's headers, so the consumer continues from this
// publish. Each attempt is a span: an event published again after a lost ack shows as
// a second publish in the same trace. Events without a traceparent get neither.
func (r *Relay) startPublishSpans(records []*kgo.Record, eventOf map[*kgo.Record]claimedEvent) publishSpans {
	tracer := r.cfg.TracerProvider.Tracer(delivery.TracerName)
	spans := publishSpans{}
	for _, rec := range records {
		e := eventOf[rec]
		span := delivery.StartPublishSpan(tracer, r.cfg.Topic, rec, e.ID, e.Traceparent,
			attribute.Int("outbox.attempt", e.Attempts+e.Rejections+1))
		if span != nil {
			spans[rec] = span
		}
	}
	return spans
}

// end closes the span of a record with the outcome of its attempt: err nil is
// acknowledged, errNotJudged is an outcome the attempt never learnt.
func (s publishSpans) end(rec *kgo.Record, err error) {
	span, ok := s[rec]
	if !ok {
		return
	}
	delete(s, rec)
	switch {
	case errors.Is(err, errNotJudged):
		span.SetStatus(codes.Error, "not judged before the lease ran out")
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
	}
	span.End()
}
