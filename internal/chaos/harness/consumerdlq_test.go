package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
	"github.com/jackc/pgx/v5"
)

func TestConsumerDeadLettersCountAllButTheHarnesssHostileRecords(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Antifraud)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const topic = "payments.events.test"
	for _, at := range []verify.RecordPosition{{Partition: 0, Offset: 1}, {Partition: 0, Offset: 2}, {Partition: 1, Offset: 5}} {
		_, err := conn.Exec(ctx, `INSERT INTO consumer_dead_letters (topic, partition, "offset", reason) VALUES ($1, $2, $3, 'x')`, topic, at.Partition, at.Offset)
		if err != nil {
			t.Fatal(err)
		}
	}
	rn := &Run{ConsumerDB: dbURL, Topic: topic}
	// {0,1} is a hostile record the harness wrote; {0,2} a copy of a real event, which
	// no consumer may dead-letter; {1,5} a record of the service's own.
	foreign := &verify.ForeignRecords{}
	foreign.Add(verify.RecordPosition{Partition: 0, Offset: 1}, "not_json")
	foreign.Add(verify.RecordPosition{Partition: 0, Offset: 2}, verify.CopyKind)
	row := consumerDeadLettersCheck(rn, foreign)
	if row.OK || !strings.HasPrefix(row.Got, "2 (3 dead letters in all); first at ") {
		t.Errorf("row = %+v, want not ok with 2 of 3 counted", row)
	}
	if row := consumerDeadLettersCheck(&Run{}, nil); !row.Off {
		t.Errorf("without a consumer database: %+v, want off", row)
	}
}
