package event

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An Envelope is everything a record says about its event besides the payload's
// fields: the id, the type, the key and the event time. Every producer of the topic
// builds its records with Record and every consumer reads them with FromRecord, so the
// two sides cannot drift apart.
type Envelope struct {
	// ID is the event id, sent as the X-Event-Id header.
	ID uuid.UUID
	// Type is one of the Type* names, sent as the X-Event-Type header.
	Type string
	// Key is the id of the entity the event is about (the payment id). It is the
	// record key, so all events of one entity share a partition and keep their order.
	Key string
	// OccurredAt is when the event happened, sent as the X-Event-Occurred-At header.
	OccurredAt time.Time
	// Payload is the JSON value of the record, e.g. an encoded PaymentCreated.
	Payload []byte
}

// Record builds the Kafka record of e for topic. publishedAt becomes the record
// timestamp: the publish time, which consumers must not mistake for the event time.
// An empty topic leaves the choice to the client's kgo.DefaultProduceTopic.
func (e Envelope) Record(topic string, publishedAt time.Time) *kgo.Record {
	return &kgo.Record{
		Topic: topic,
		Key:   []byte(e.Key),
		Value: e.Payload,
		Headers: []kgo.RecordHeader{
			{Key: HeaderID, Value: []byte(e.ID.String())},
			{Key: HeaderType, Value: []byte(e.Type)},
			{Key: HeaderOccurredAt, Value: []byte(e.OccurredAt.UTC().Format(time.RFC3339Nano))},
		},
		Timestamp: publishedAt,
	}
}

// A HeaderError says which envelope header of a record is missing or unreadable. A
// record that fails this way fails the same way on every redelivery.
type HeaderError struct {
	// Header is HeaderID, HeaderType or HeaderOccurredAt.
	Header string
	// Value is what the record carried; empty when the header is missing or empty.
	Value string
	// Err is why Value could not be read; nil when the header is missing.
	Err error
}

func (e *HeaderError) Error() string {
	if e.Value == "" {
		return "no " + e.Header + " header"
	}
	return fmt.Sprintf("%s %q: %v", e.Header, e.Value, e.Err)
}

func (e *HeaderError) Unwrap() error { return e.Err }

// FromRecord reads the envelope of r. It checks the headers only: whether the type is
// one the caller handles, and whether the payload decodes, is the caller's business.
// It returns the concrete *HeaderError, as a nil *HeaderError means success, so that
// the caller can map each header to its own error codes without a type assertion.
func FromRecord(r *kgo.Record) (Envelope, *HeaderError) {
	headers := HeaderValues(r)
	rawID := headers[HeaderID]
	if rawID == "" {
		return Envelope{}, &HeaderError{Header: HeaderID}
	}
	id, err := uuid.Parse(rawID)
	if err != nil {
		return Envelope{}, &HeaderError{Header: HeaderID, Value: rawID, Err: err}
	}
	typ := headers[HeaderType]
	if typ == "" {
		return Envelope{}, &HeaderError{Header: HeaderType}
	}
	rawOccurredAt := headers[HeaderOccurredAt]
	if rawOccurredAt == "" {
		return Envelope{}, &HeaderError{Header: HeaderOccurredAt}
	}
	occurredAt, err := time.Parse(time.RFC3339Nano, rawOccurredAt)
	if err != nil {
		return Envelope{}, &HeaderError{Header: HeaderOccurredAt, Value: rawOccurredAt, Err: err}
	}
	return Envelope{ID: id, Type: typ, Key: string(r.Key), OccurredAt: occurredAt, Payload: r.Value}, nil
}

// HeaderValues returns the record's headers as a map; for a repeated key the last
// value wins, as in most Kafka clients' "last header" lookups. FromRecord reads the
// headers this way, so a consumer that stores them (with a dead letter, say) stores
// what was decoded.
func HeaderValues(r *kgo.Record) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}
