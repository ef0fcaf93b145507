package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// The replication side of the relay: one connection in replication mode, the slot, and
// the pgoutput messages turned into outbox events. Nothing here talks to Kafka.

// An outboxEvent is one inserted outbox row as the stream carries it.
type outboxEvent struct {
	ID uuid.UUID
	// Seq is the row's place in the outbox (outbox_events.seq): which events of its
	// aggregate came before it (store.blockedAggregates).
	Seq         int64
	Type        string
	AggregateID string
	Payload     []byte
	CreatedAt   time.Time
	// Traceparent is the writer's W3C trace context, "" when it traced nothing: the
	// publish continues that trace (trace.go).
	Traceparent string
}

// errSlotBusy means another relay streams from the slot: PostgreSQL lets one
// connection at a time read a slot (SQLSTATE 55006, object_in_use).
var errSlotBusy = errors.New("replication slot is in use by another relay")

// replicationConn is the relay's connection in replication mode.
type replicationConn struct {
	conn *pgconn.PgConn
	// relations maps pgoutput's relation ids to the place of each of their columns, by
	// name: a Relation message precedes the first change of a table in each session,
	// and again after DDL.
	relations map[uint32]map[string]int
	types     *pgtype.Map
}

// connect opens a replication connection to the database of databaseURL. TimeZone and
// DateStyle are pinned because pgoutput sends values as text in the session's format.
func connect(ctx context.Context, databaseURL string) (*replicationConn, error) {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return nil, errors.New("database URL does not parse")
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["datestyle"] = "ISO"
	cfg.RuntimeParams["application_name"] = "outbox_cdc_relay"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection: %w", err)
	}
	return &replicationConn{conn: conn, relations: map[uint32]map[string]int{}, types: pgtype.NewMap()}, nil
}

func (c *replicationConn) close(ctx context.Context) { _ = c.conn.Close(ctx) }

// createSlotIfMissing creates the slot unless it exists. When it creates it, it returns
// the name of the snapshot the slot starts from: the database as the slot saw it, so
// that the rows pending before the slot existed can be read exactly (catchUp). The
// snapshot lives only until this connection runs its next command.
func (c *replicationConn) createSlotIfMissing(ctx context.Context, slot string) (snapshot string, err error) {
	results, err := c.conn.Exec(ctx, fmt.Sprintf(
		"SELECT 1 FROM pg_replication_slots WHERE slot_name = '%s'", slot)).ReadAll()
	if err != nil {
		return "", fmt.Errorf("look up replication slot %s: %w", slot, err)
	}
	if len(results) == 1 && len(results[0].Rows) == 1 {
		return "", nil
	}
	created, err := pglogrepl.CreateReplicationSlot(ctx, c.conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" {
		return "", nil // another relay created it a moment ago: it does the catch-up
	}
	if err != nil {
		return "", fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	return created.SnapshotName, nil
}

// start begins streaming from the slot's confirmed position (LSN 0 means "where the
// slot is"): everything that committed after the last position this relay or a
// previous one confirmed, in commit order.
func (c *replicationConn) start(ctx context.Context, slot, publication string) error {
	err := pglogrepl.StartReplication(ctx, c.conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", publication)},
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" {
		return errSlotBusy
	}
	if err != nil {
		return fmt.Errorf("start replication from slot %s: %w", slot, err)
	}
	return nil
}

// confirm tells the server that everything before pos is done with: the slot's
// confirmed position moves there, and the WAL before it may be recycled. It is the only
// place the relay gives up a position, and the relay calls it only with positions whose
// events Kafka acknowledged (Relay.confirmed).
func (c *replicationConn) confirm(ctx context.Context, pos pglogrepl.LSN) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, c.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	return nil
}

// stop ends streaming the way the protocol does: CopyDone, then the server's answers up
// to its ReadyForQuery. The server handles a connection's messages in order, so when
// stop returns every status update sent before it has moved the slot: a relay that
// has stopped no longer moves the slot's confirmed position behind its caller's back.
func (c *replicationConn) stop(ctx context.Context) error {
	c.conn.Frontend().Send(&pgproto3.CopyDone{})
	if err := c.conn.Frontend().Flush(); err != nil {
		return fmt.Errorf("end the replication stream: %w", err)
	}
	for {
		msg, err := c.conn.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("end the replication stream: %w", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("end the replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.ReadyForQuery:
			return nil
		}
	}
}

// A streamMessage is what one receive produced: at most one of its parts is set.
type streamMessage struct {
	// insert is an inserted outbox row.
	insert *outboxEvent
	// undecodable is a row whose columns did not decode, with what the stream said of
	// its id (uuid.Nil when even that is unreadable) and why.
	undecodable *decodeError
	// begin is set by a Begin: a transaction's changes follow, up to its Commit.
	begin bool
	// commitEnd is set by a Commit: the end of the transaction whose inserts came
	// before it. Confirming it says the transaction is done with.
	commitEnd pglogrepl.LSN
	// idleAt is set by a keepalive: the server has sent everything before this
	// position, and no transaction is open on the stream.
	idleAt pglogrepl.LSN
	// replyRequested: the server asks for a status report now.
	replyRequested bool
}

// A decodeError is an inserted row the relay cannot turn into an event.
type decodeError struct {
	ID  uuid.UUID
	Err error
}

// receive waits until deadline for the next message of the stream. It returns a zero
// streamMessage and no error when the deadline passes first.
func (c *replicationConn) receive(ctx context.Context, deadline time.Time) (streamMessage, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	raw, err := c.conn.ReceiveMessage(ctx)
	if err != nil {
		if pgconn.Timeout(err) && ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
			return streamMessage{}, nil
		}
		return streamMessage{}, fmt.Errorf("receive from the replication stream: %w", err)
	}
	switch msg := raw.(type) {
	case *pgproto3.ErrorResponse:
		return streamMessage{}, fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyData:
		return c.decodeCopyData(msg.Data)
	default:
		return streamMessage{}, nil // e.g. a NoticeResponse: nothing for the relay
	}
}

func (c *replicationConn) decodeCopyData(data []byte) (streamMessage, error) {
	if len(data) == 0 {
		return streamMessage{}, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		keepalive, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return streamMessage{}, fmt.Errorf("parse keepalive: %w", err)
		}
		return streamMessage{idleAt: keepalive.ServerWALEnd, replyRequested: keepalive.ReplyRequested}, nil
	case pglogrepl.XLogDataByteID:
		xlog, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return streamMessage{}, fmt.Errorf("parse XLogData: %w", err)
		}
		return c.decodeLogical(xlog.WALData)
	}
	return streamMessage{}, nil
}

// decodeLogical turns one pgoutput message into a streamMessage. Type and Origin
// messages carry nothing the relay needs; updates and deletes never come (the
// publication sends inserts only).
func (c *replicationConn) decodeLogical(walData []byte) (streamMessage, error) {
	msg, err := pglogrepl.Parse(walData)
	if err != nil {
		return streamMessage{}, fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch msg := msg.(type) {
	case *pglogrepl.RelationMessage:
		places := make(map[string]int, len(msg.Columns))
		for i, col := range msg.Columns {
			places[col.Name] = i
		}
		c.relations[msg.RelationID] = places
	case *pglogrepl.InsertMessage:
		e, err := c.decodeInsert(msg)
		if err != nil {
			return streamMessage{undecodable: err}, nil
		}
		return streamMessage{insert: &e}, nil
	case *pglogrepl.BeginMessage:
		return streamMessage{begin: true}, nil
	case *pglogrepl.CommitMessage:
		return streamMessage{commitEnd: msg.TransactionEndLSN}, nil
	}
	return streamMessage{}, nil
}

// decodeInsert reads an outbox row from the text values pgoutput sends. The payload is
// jsonb's text form, the same bytes the polling relay reads through pgx. It runs once
// per event on the receiver's goroutine, which a drain keeps busy: no map or
// reflection per row (a CPU profile of the drain had them at a quarter of the
// receiver's time).
func (c *replicationConn) decodeInsert(msg *pglogrepl.InsertMessage) (outboxEvent, *decodeError) {
	places, ok := c.relations[msg.RelationID]
	if !ok {
		return outboxEvent{}, &decodeError{Err: fmt.Errorf("insert into unknown relation %d", msg.RelationID)}
	}
	value := func(name string) []byte {
		i, ok := places[name]
		if !ok || i >= len(msg.Tuple.Columns) || msg.Tuple.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return nil // NULL, unchanged TOAST or a column the table lacks: no value
		}
		return msg.Tuple.Columns[i].Data
	}
	var e outboxEvent
	var bad *decodeError
	fail := func(err error) {
		if bad == nil {
			bad = &decodeError{ID: e.ID, Err: err}
		}
	}
	if err := e.ID.UnmarshalText(value("id")); err != nil {
		return outboxEvent{}, &decodeError{Err: fmt.Errorf("column id %q: %w", value("id"), err)}
	}
	e.Type, e.AggregateID, e.Payload = string(value("event_type")), string(value("aggregate_id")), value("payload")
	e.Traceparent = string(value("traceparent")) // NULL arrives as no value: ""
	seq, err := strconv.ParseInt(string(value("seq")), 10, 64)
	if err != nil {
		fail(fmt.Errorf("column seq %q: %w", value("seq"), err))
	}
	e.Seq = seq
	if e.Type == "" || e.AggregateID == "" || e.Payload == nil {
		fail(errors.New("event_type, aggregate_id or payload is missing from the stream"))
	}
	if e.CreatedAt, err = c.timestamptz(value("created_at")); err != nil {
		fail(fmt.Errorf("column created_at %q: %w", value("created_at"), err))
	}
	return e, bad
}

// pgTimestamptz is the text form of a timestamptz in the session's ISO DateStyle and
// UTC (connect pins both), as pgoutput sends it: "2026-01-02 15:04:05.123456+00".
const pgTimestamptz = "2006-01-02 15:04:05.999999Z07"

// timestamptz parses a timestamptz column: directly in the usual form, and through
// pgtype for anything else (infinity, years past 9999), which is rare and slower.
func (c *replicationConn) timestamptz(text []byte) (time.Time, error) {
	if t, err := time.Parse(pgTimestamptz, string(text)); err == nil {
		return t.UTC(), nil
	}
	var t time.Time
	err := c.types.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, text, &t)
	return t, err
}
