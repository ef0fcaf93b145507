package poll

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// holdBack asks the partition breaker which of records to send, once some partition
// has stopped answering while others did (delivery.PartitionBreaker; publish asks only
// then), and returns them with the failures of the events it held back, unsent, and
// the partition of each record. The batch's publish may take probeTime.
func (r *Relay) holdBack(ctx context.Context, p delivery.Producer, records []*kgo.Record, eventOf map[*kgo.Record]claimedEvent, probeTime time.Duration) (send []*kgo.Record, held []failure, admitted delivery.Admission, partitionOf map[*kgo.Record]int32) {
	partitionOf = r.partitionsOf(ctx, p, records)
	admitted = r.breaker.Admit(records, partitionOf, probeTime)
	for _, rec := range records {
		if wait, isHeld := admitted.HoldFor[rec]; isHeld {
			held = append(held, r.heldBack(eventOf[rec], partitionOf[rec], wait))
			continue
		}
		send = append(send, rec)
	}
	return send, held, admitted, partitionOf
}

// judgePartitions tells the breaker, partition by partition, what the broker made of a
// batch's records sent at sent, and reports whether the broker answered this relay
// meanwhile (publish asks it when a partition was open already, partitionOf given, or a
// record failed). It returns the partition of each record when it knows them. It needs
// to know where the records went only when some hit a transport failure while the
// broker answered (a partition may have stopped answering), or when a partition was
// open already; otherwise it only ends the batch's probe, if any.
func (r *Relay) judgePartitions(ctx context.Context, p delivery.Producer, admitted delivery.Admission, sent time.Time, results kgo.ProduceResults, partitionOf map[*kgo.Record]int32) (map[*kgo.Record]int32, bool) {
	var anyAcked, anyTransport bool
	for _, res := range results {
		anyAcked = anyAcked || res.Err == nil
		anyTransport = anyTransport || (res.Err != nil && !delivery.IsRejection(res.Err))
	}
	if anyAcked {
		r.breaker.Acked() // once per batch: it takes the breaker's lock
	}
	answered := r.breaker.AnsweredSince(sent)
	if partitionOf == nil && anyTransport && answered {
		records := make([]*kgo.Record, len(results))
		for i, res := range results {
			records[i] = res.Record
		}
		partitionOf = r.partitionsOf(ctx, p, records)
	}
	r.breaker.Judge(admitted, results, partitionOf, answered)
	r.metrics.shared.SetPartitionsUnavailable(r.breaker.OpenCount())
	return partitionOf, answered
}

// partitionsOf is the partition of each record (delivery.PartitionsOf), asking
// the client's metadata cache for the partition count under one QueryTimeout.
func (r *Relay) partitionsOf(ctx context.Context, p delivery.Producer, records []*kgo.Record) map[*kgo.Record]int32 {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	return delivery.PartitionsOf(ctx, p, r.cfg.Topic, records)
}

// heldBack is the failure of an event whose partition's breaker is open: it was not
// sent, waits until the breaker may let it through, and counts no attempt.
func (r *Relay) heldBack(e claimedEvent, partition int32, wait time.Duration) failure {
	r.metrics.shared.CountHeldBack(1)
	return failure{ID: e.ID, HeldBack: true, RetryIn: wait,
		Err: fmt.Sprintf("held back, not sent: partition %d stopped answering while others did", partition)}
}
