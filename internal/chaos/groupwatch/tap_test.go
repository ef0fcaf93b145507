package groupwatch

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// Two group members reach the real broker only through the tap, which must see their
// joins, each generation's assignments and their commits; a commit that the broker
// accepts for a partition the other member owns is the one NonOwnerCommits reports.
func TestTapRecordsTheGroupProtocol(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	brokers, topic := testenv.KafkaBrokers(t), testenv.NewTopic(t, 3)
	group := "tap-" + topic
	tap := NewTap(brokers[0], time.Now(), slog.New(slog.DiscardHandler))
	defer tap.Close()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer producer.Close()
	for p := range int32(3) {
		if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	a := newMember(t, tap, "a", group, topic)
	for got := 0; got < 3; {
		fetches := a.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("poll through the tap: %d of 3 records: %v", got, err)
		}
		records := fetches.Records()
		got += len(records)
		if err := a.CommitRecords(ctx, records...); err != nil {
			t.Fatalf("commit through the tap: %v", err)
		}
	}
	b := newMember(t, tap, "b", group, topic)
	// Poll both, so that their rebalance goes through, until b owns a partition in the
	// generation that a holds too.
	var bOwns int32
	var gen int32
	waitFor(ctx, t, "b to be given a partition", func() bool {
		pollBriefly(ctx, a)
		pollBriefly(ctx, b)
		h := tap.History()
		owned := h.Owned("b", topic)
		if len(owned) == 0 {
			return false
		}
		gen = lastGeneration(h, "b")
		bOwns = owned[0]
		return lastGeneration(h, "a") == gen
	})

	h := tap.History()
	if !slices.ContainsFunc(h.Joins, func(j Join) bool { return j.Instance == "a" }) || !slices.ContainsFunc(h.Joins, func(j Join) bool { return j.Instance == "b" }) {
		t.Fatalf("joins: got %+v, want one of a and one of b", h.Joins)
	}
	if got := h.NonOwnerCommits(topic); got.Judged < 3 || len(got.NonOwner) != 0 {
		t.Fatalf("commits of a's own partitions: got %+v, want >= 3 judged and no non-owner commit", got)
	}

	// a commits b's partition: the broker takes it, a current member's commit.
	var code int16 = -1
	a.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: {bOwns: {Epoch: -1, Offset: 1}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions) == 1 {
				code = resp.Topics[0].Partitions[0].ErrorCode
			}
		})
	if code != 0 {
		t.Fatalf("a's commit of b's partition %d in generation %d: error code %d, want 0 (accepted)", bOwns, gen, code)
	}
	got := tap.History().NonOwnerCommits(topic)
	if len(got.NonOwner) != 1 || got.NonOwner[0].Instance != "a" || got.NonOwner[0].OwnerInstance != "b" || got.NonOwner[0].Partition != bOwns {
		t.Fatalf("non-owner commits: got %+v, want a's commit of b's partition %d", got.NonOwner, bOwns)
	}
}

func newMember(t *testing.T, tap *Tap, instance, group, topic string) *kgo.Client {
	t.Helper()
	addr, err := tap.Listen(instance)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("new member %s: %v", instance, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func pollBriefly(ctx context.Context, cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	cl.PollFetches(ctx)
}

func lastGeneration(h History, instance string) int32 {
	gen := int32(-1)
	for _, a := range h.Assignments {
		if a.Instance == instance {
			gen = a.Generation
		}
	}
	return gen
}

func waitFor(ctx context.Context, t *testing.T, what string, done func() bool) {
	t.Helper()
	for !done() {
		if ctx.Err() != nil {
			t.Fatalf("wait for %s: %v", what, ctx.Err())
		}
	}
}
