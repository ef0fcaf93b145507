package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// TopicContents is everything the verifier learned from reading a topic end to end:
// the identities it carries (which event ids, about which payments) and the records that
// break the record contract of docs/contract.md.
type TopicContents struct {
	// Partitions is the topic's partition count.
	Partitions int
	// Records counts every committed data record, copies included.
	Records int
	// EventCopies counts the records of each X-Event-Id.
	EventCopies map[string]int
	// PaymentEvents counts the records about each payment id: the payload's payment_id,
	// or the record key when the payload has none.
	PaymentEvents map[string]int
	// PaymentEventIDs lists the distinct X-Event-Ids of each payment id, in the order
	// they were read.
	PaymentEventIDs map[string][]string
	// TransitionEventIDs lists the distinct X-Event-Ids of each transition, by payment id
	// and sequence (1 for PaymentCreated). One transition has one event: a second id is a
	// relay that minted a new one for a retry, which no consumer can deduplicate.
	TransitionEventIDs map[string]map[int][]string
	// PaymentOrder lists each payment's events by first occurrence: every distinct event
	// id once, where its first copy is in partition offset order (all of a payment's
	// events share a partition when their key is right). The lifecycle order is checked
	// on it (order.go).
	PaymentOrder map[string][]TopicEvent
	// PaymentPayloads lists the distinct payment fields the decoded PaymentCreated
	// payloads of each payment id carried, for comparison with the committed payment.
	PaymentPayloads map[string][]PaymentFields
	// BadKey, BadHeaders and BadPayload are the records that break one rule each of the
	// record contract: the key is the payment id; the three headers are present and
	// readable; the value is the v1 payload of its type, with every field.
	BadKey, BadHeaders, BadPayload Violations
}

// Violations counts the records that break one rule of the record contract and keeps
// the first one's description, so that the verdict can show an example to look up.
type Violations struct {
	// Count is how many records break the rule.
	Count int
	// First is where the first of them is (partition and offset) and what is wrong.
	First string
}

func (v *Violations) add(where, problem string) {
	v.Count++
	if v.Count == 1 {
		v.First = where + ": " + problem
	}
}

// PaymentFields are what the payments table and an event's payload must agree on.
type PaymentFields struct {
	UserID   string
	Amount   int64
	Currency string
}

// String describes the fields for the notes of a report.
func (f PaymentFields) String() string {
	return fmt.Sprintf("user %q, amount %d, currency %q", f.UserID, f.Amount, f.Currency)
}

// A TopicEvent is one event of a payment as the topic first shows it.
type TopicEvent struct {
	EventID  string
	Type     string
	Sequence int
	// Where its first copy is.
	Partition int32
	Offset    int64
}

// NewTopicContents returns contents with nothing counted yet, ready for Add.
func NewTopicContents() TopicContents {
	return TopicContents{
		EventCopies:        map[string]int{},
		PaymentEvents:      map[string]int{},
		PaymentEventIDs:    map[string][]string{},
		TransitionEventIDs: map[string]map[int][]string{},
		PaymentOrder:       map[string][]TopicEvent{},
		PaymentPayloads:    map[string][]PaymentFields{},
	}
}

// ReadTopic reads every partition of topic from its start offset to the last stable
// offset it had when the call began, with a client of its own (no consumer group, so it
// disturbs no one and commits nothing). Use the DIRECT listener: the verifier must not
// be behind the faults it judges.
//
// The isolation is read-committed: a transactional producer's aborted records never
// reached a consumer, so they must not count as delivered. The reader keeps the
// transactions' control records (commit and abort markers) only to see its progress:
// the last offset before the end may be a marker, which a plain fetch would skip.
func ReadTopic(ctx context.Context, brokers []string, topic string) (TopicContents, error) {
	return ReadTopicExcept(ctx, brokers, topic, nil)
}

// ReadTopicExcept is ReadTopic skipping the foreign records, which the harness wrote
// itself as another producer would: they are not the service's records, and the
// contract rows judge the service. A nil foreign skips nothing. security are the options
// that reach brokers besides their address (TLS, SASL), none for a plaintext broker.
func ReadTopicExcept(ctx context.Context, brokers []string, topic string, foreign *ForeignRecords, security ...kgo.Opt) (TopicContents, error) {
	contents := NewTopicContents()
	admCl, err := kafkasec.NewClient(brokers, security)
	if err != nil {
		return contents, fmt.Errorf("new Kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return contents, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	// The committed offsets are the last stable offsets: nothing below them belongs to
	// a transaction still open.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return contents, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	contents.Partitions = len(ends[topic])

	// remaining: the partitions that still have records before their end offset.
	remaining := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > start.Offset {
			remaining[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(start.Offset)
		}
	})
	if len(remaining) == 0 {
		return contents, nil
	}

	cl, err := kafkasec.NewClient(brokers, security,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		return contents, fmt.Errorf("new Kafka consumer: %w", err)
	}
	defer cl.Close()
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return contents, fmt.Errorf("read topic %s: %d partitions unfinished: %w", topic, len(remaining), err)
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return contents, fmt.Errorf("read topic %s: %w", topic, fetchErr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok {
				return
			}
			// A record at or past the end offset was written after the call began (or
			// is the marker of a transaction that straddles the end): it is not read,
			// but it shows the partition is done.
			if r.Offset < end && !r.Attrs.IsControl() && !foreign.has(r.Partition, r.Offset) {
				contents.Add(r)
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return contents, nil
}

// Add counts one record and checks it against the record contract.
func (c *TopicContents) Add(r *kgo.Record) {
	c.Records++
	where := fmt.Sprintf("partition %d offset %d", r.Partition, r.Offset)

	env, headerErr := event.FromRecord(r)
	switch {
	case headerErr != nil:
		c.BadHeaders.add(where, headerErr.Error())
	case !slices.Contains(event.Types, env.Type):
		c.BadHeaders.add(where, fmt.Sprintf("%s %q, want one of %s", event.HeaderType, env.Type, strings.Join(event.Types, ", ")))
	}

	// A record whose type header is unreadable is read as the PaymentCreated it most
	// likely is, so that its payload is still checked.
	typ := event.HeaderValues(r)[event.HeaderType]
	if !slices.Contains(event.Types, typ) {
		typ = event.TypePaymentCreated
	}
	payload, problem := decodePayload(typ, r.Value)
	paymentID := string(r.Key)
	if problem != "" {
		c.BadPayload.add(where, problem)
	} else {
		paymentID = payload.PaymentID
		if typ == event.TypePaymentCreated && !slices.Contains(c.PaymentPayloads[paymentID], payload.Fields) {
			c.PaymentPayloads[paymentID] = append(c.PaymentPayloads[paymentID], payload.Fields)
		}
		// The key decides the partition: a key other than the payment id scatters one
		// payment's events over partitions, and their order is lost.
		if string(r.Key) != paymentID {
			c.BadKey.add(where, fmt.Sprintf("key %q, payment_id %q", r.Key, paymentID))
		}
	}
	if paymentID == "" {
		return // nothing says which payment this record is about
	}
	c.PaymentEvents[paymentID]++

	// The raw header, even if it is no UUID: a copy is a copy of whatever id it carries.
	eventID := event.HeaderValues(r)[event.HeaderID]
	if eventID == "" {
		return
	}
	c.EventCopies[eventID]++
	if slices.Contains(c.PaymentEventIDs[paymentID], eventID) {
		return // a copy: only the first occurrence counts for the order
	}
	c.PaymentEventIDs[paymentID] = append(c.PaymentEventIDs[paymentID], eventID)
	if problem != "" {
		return // no readable sequence
	}
	if c.TransitionEventIDs[paymentID] == nil {
		c.TransitionEventIDs[paymentID] = map[int][]string{}
	}
	c.TransitionEventIDs[paymentID][payload.Sequence] = append(c.TransitionEventIDs[paymentID][payload.Sequence], eventID)
	c.PaymentOrder[paymentID] = append(c.PaymentOrder[paymentID], TopicEvent{
		EventID: eventID, Type: typ, Sequence: payload.Sequence, Partition: r.Partition, Offset: r.Offset,
	})
}

// Unique counts distinct event ids.
func (c TopicContents) Unique() int { return len(c.EventCopies) }
