package antifraud

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group side of the consumer: which offsets it may commit, and what it does when
// partitions come and go. With BlockRebalanceOnPoll the callbacks below run only between
// batches (after AllowRebalance), never while a batch is in flight.

// markProcessed records that the records' transaction committed. Records of a partition
// come in offset order, so the last one of each partition wins.
func (c *Consumer) markProcessed(records []*kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range records {
		c.processed[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	}
}

// commitProcessed commits the processed offsets of the partitions (all of them if
// partitions is nil) and forgets them: it is called when this member is done with them.
func (c *Consumer) commitProcessed(ctx context.Context, cl *kgo.Client, partitions []int32) {
	c.mu.Lock()
	offsets := map[int32]kgo.EpochOffset{}
	if partitions == nil {
		partitions = slices.Collect(maps.Keys(c.processed))
	}
	for _, p := range partitions {
		if o, ok := c.processed[p]; ok {
			offsets[p] = o
			delete(c.processed, p)
		}
	}
	c.mu.Unlock()
	if len(offsets) == 0 {
		return
	}

	ctx, cancel := context.WithTimeout(ctx, c.cfg.BatchTimeout)
	defer cancel()
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{c.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			// A failed commit loses nothing: the next owner of the partitions reads the
			// events again and absorbs them as duplicates.
			if err := commitErr(resp, err); err != nil {
				c.logger.Warn("commit processed offsets failed", slog.Any("partitions", slices.Sorted(maps.Keys(offsets))), slog.Any("err", err))
			}
		})
}

// commitErr is the first error of an offset commit: the request's, or that of a partition
// the broker refused (a stale generation, say), which CommitOffsetsSync reports only in resp.
func commitErr(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil {
		return err // resp may be nil
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.logger.Info("partitions assigned", slog.Any("partitions", assigned[c.cfg.Topic]))
}

// onRevoked runs when a rebalance takes partitions away, or when the client leaves the
// group. Everything polled has been processed by then (see above), so committing the
// processed offsets hands the partitions over without a redelivery.
func (c *Consumer) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	partitions := revoked[c.cfg.Topic]
	c.logger.Info("partitions revoked", slog.Any("partitions", partitions))
	c.commitProcessed(ctx, cl, partitions)
	for _, p := range partitions {
		c.metrics.forgetLag(p)
	}
}

// onLost runs when this member lost partitions without a clean handover (its session
// expired, say): another member may already own them and have committed further. A
// commit now could rewind that member's offsets, so nothing is committed.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	partitions := lost[c.cfg.Topic]
	c.logger.Warn("partitions lost, their uncommitted offsets are left to the new owner", slog.Any("partitions", partitions))
	c.mu.Lock()
	for _, p := range partitions {
		delete(c.processed, p)
		c.metrics.forgetLag(p)
	}
	c.mu.Unlock()
}

// shutdown commits what was processed, then leaves the group and closes the client.
func (c *Consumer) shutdown(cl *kgo.Client) {
	c.commitProcessed(context.Background(), cl, nil)
	start := time.Now()
	cl.CloseAllowingRebalance() // leaves the group: the partitions move on at once
	c.logger.Info("left the group", slog.String("close_took", time.Since(start).String()))
}

// crash is the fault-injected stop: like a killed process, it commits nothing. It still
// closes the client, so that no goroutine outlives Run; leaving the group only makes the
// partitions move sooner than after a session timeout.
func (c *Consumer) crash(cl *kgo.Client) {
	c.mu.Lock()
	clear(c.processed)
	c.mu.Unlock()
	cl.CloseAllowingRebalance()
}
