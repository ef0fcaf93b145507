package cdc

// The stream floor: the simplest reader of the backlog the CDC relay drains. It reads
// the same pgoutput stream of a slot created before the backlog was committed, as the
// relay's drain does, and parses every message, but publishes nothing and writes
// nothing back: no Kafka, no marks, no decoding into events. What one walsender sends
// bounds the relay's drain, so this is the rate the relay could reach at best, measured
// beside the polling relay in the same repetition.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
)

// floorStatusInterval is how often the reader confirms what it has read at the latest,
// well inside the server's wal_sender_timeout (60 s by default).
const floorStatusInterval = 10 * time.Second

// backlogFill commits a backlog of n events into the outbox of pool.
type backlogFill func(ctx context.Context, pool *pgxpool.Pool, n int) error

// measureStreamFloor creates the floor's slot in the database of dbURL, commits a
// backlog of n events with fill, and reads it from the stream. It returns the events
// per second from START_REPLICATION to the commit that ends the backlog.
func measureStreamFloor(ctx context.Context, dbURL string, n int, fill backlogFill) (float64, error) {
	conn, slot, err := openFloorSlot(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("open pool: %w", err)
	}
	err = fill(ctx, pool, n)
	pool.Close()
	if err != nil {
		return 0, err
	}

	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	read, err := readInserts(ctx, conn, slot, n)
	elapsed := time.Since(start)
	if err != nil {
		return 0, err
	}
	if read != n {
		return 0, fmt.Errorf("stream floor read %d inserts, want the backlog's %d", read, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// openFloorSlot opens a replication connection to the database of dbURL and creates
// the floor's slot on it, with the CDC relay's plugin. The slot is temporary: the
// server drops it when the connection closes, so a run that fails leaves no slot
// holding WAL. Its name is random because slot names are the server's, not a
// database's: parallel tests each need their own.
func openFloorSlot(ctx context.Context, dbURL string) (*pgconn.PgConn, string, error) {
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		return nil, "", errors.New("database URL does not parse")
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "bench_stream_floor"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("open replication connection: %w", err)
	}
	slot := fmt.Sprintf("bench_stream_floor_%08x", rand.Uint32())
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, Temporary: true})
	if err != nil {
		_ = conn.Close(ctx)
		return nil, "", fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return conn, slot, nil
}

// readInserts streams the floor's slot with the CDC relay's plugin arguments and
// parses each message until a commit ends a transaction with the backlog's want-th
// insert, or later. It returns the inserts it read.
func readInserts(ctx context.Context, conn *pgconn.PgConn, slot string, want int) (int, error) {
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names 'outbox_events_inserts'"},
	})
	if err != nil {
		return 0, fmt.Errorf("start replication from slot %s: %w", slot, err)
	}
	inserts := 0
	var committed pglogrepl.LSN
	nextStatus := time.Now().Add(floorStatusInterval)
	for {
		raw, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return inserts, fmt.Errorf("receive from the replication stream: %w", err)
		}
		replyRequested := false
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return inserts, fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				keepalive, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return inserts, fmt.Errorf("parse keepalive: %w", err)
				}
				replyRequested = keepalive.ReplyRequested
			case pglogrepl.XLogDataByteID:
				xlog, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return inserts, fmt.Errorf("parse XLogData: %w", err)
				}
				logical, err := pglogrepl.Parse(xlog.WALData)
				if err != nil {
					return inserts, fmt.Errorf("parse pgoutput message: %w", err)
				}
				switch logical := logical.(type) {
				case *pglogrepl.InsertMessage:
					inserts++
				case *pglogrepl.CommitMessage:
					committed = logical.TransactionEndLSN
					if inserts >= want {
						return inserts, nil
					}
				}
			}
		}
		if replyRequested || !time.Now().Before(nextStatus) {
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: committed}); err != nil {
				return inserts, fmt.Errorf("send standby status: %w", err)
			}
			nextStatus = time.Now().Add(floorStatusInterval)
		}
	}
}

// streamFloors are one repetition's stream floor, in both shapes of the backlog.
type streamFloors struct {
	// oneTransaction is the bench's backlog (benchenv.FillBacklog), committed in one
	// transaction: pgoutput decodes it whole before it sends its first row.
	oneTransaction float64
	// oneRowTransactions is the same backlog with each event in a transaction of its
	// own, as the API commits them.
	oneRowTransactions float64
}

// streamFloor measures both shapes on the database of dbURL.
func (b cdcBench) streamFloor(ctx context.Context, dbURL string) (streamFloors, error) {
	var f streamFloors
	var err error
	if f.oneTransaction, err = measureStreamFloor(ctx, dbURL, b.cfg.Backlog, benchenv.FillBacklog); err != nil {
		return f, fmt.Errorf("backlog in one transaction: %w", err)
	}
	if f.oneRowTransactions, err = measureStreamFloor(ctx, dbURL, b.cfg.Backlog, benchenv.FillBacklogOneEventPerTransaction); err != nil {
		return f, fmt.Errorf("backlog one event per transaction: %w", err)
	}
	return f, nil
}
