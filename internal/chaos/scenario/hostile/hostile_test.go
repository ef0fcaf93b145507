package hostile

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// Every hostile kind must break the record contract, or a consumer that decides it
// would be right to; the copy of a real event must keep it, so that only its payload
// and the dedup set it apart.
func TestHostileRecordsBreakTheContract(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, k := range hostileKinds {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			c := verify.NewTopicContents()
			c.Add(k.build(now))
			if broken := c.BadKey.Count + c.BadHeaders.Count + c.BadPayload.Count; broken == 0 {
				t.Errorf("%s keeps the record contract; want it broken", k.kind)
			}
		})
	}
	t.Run(verify.CopyKind, func(t *testing.T) {
		t.Parallel()
		c := verify.NewTopicContents()
		c.Add(duplicateRecord(uuid.New(), uuid.New(), now))
		if broken := c.BadKey.Count + c.BadHeaders.Count + c.BadPayload.Count; broken != 0 {
			t.Errorf("the copy breaks the contract: %+v %+v %+v; want a valid record", c.BadKey, c.BadHeaders, c.BadPayload)
		}
	})
}

// ReadTopicExcept must leave out exactly the positions the harness wrote, and a nil set
// nothing.
func TestReadTopicExceptLeavesOutForeignRecords(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	real, hostile := testenv.PaymentRecord(t, "", uuid.New(), uuid.New()), hostileKinds[0].build(time.Now())
	if err := cl.ProduceSync(ctx, real, hostile).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	foreign := &verify.ForeignRecords{}
	foreign.Add(verify.RecordPosition{Partition: hostile.Partition, Offset: hostile.Offset}, hostileKinds[0].kind)

	for _, tc := range []struct {
		name        string
		foreign     *verify.ForeignRecords
		wantRecords int
		wantBad     int
	}{
		{"nil skips nothing", nil, 2, 1},
		{"foreign left out", foreign, 1, 0},
	} {
		got, err := verify.ReadTopicExcept(ctx, brokers, topic, tc.foreign)
		if err != nil {
			t.Fatalf("%s: ReadTopicExcept: %v", tc.name, err)
		}
		if bad := got.BadHeaders.Count + got.BadPayload.Count + got.BadKey.Count; got.Records != tc.wantRecords || bad != tc.wantBad {
			t.Errorf("%s: got %d records, %d breaking the contract; want %d and %d", tc.name, got.Records, bad, tc.wantRecords, tc.wantBad)
		}
	}
}
