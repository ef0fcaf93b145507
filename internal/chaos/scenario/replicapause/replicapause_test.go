package replicapause

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// A row the paused replica must not touch counts as changed when any of its columns
// differs afterwards, or when it is gone; rows that appear later are not its business,
// and neither is a row that a batch's transaction no longer holds afterwards (the
// database ended the frozen replica's transaction: the row was free to take).
func TestChangedRows(t *testing.T) {
	t.Parallel()
	before := map[string]outboxRowState{
		"published": {Status: "published", Detail: "12:00:01"},
		"leased":    {Status: "pending", Owner: "t-other"},
		"held":      {Status: "pending", Owner: "held", Detail: "0"},
		"released":  {Status: "pending", Owner: "held", Detail: "0"},
		"same":      {Status: "published", Detail: "12:00:02"},
		"gone":      {Status: "published", Detail: "12:00:03"},
	}
	after := map[string]outboxRowState{
		"published": {Status: "published", Detail: "12:00:09"},       // marked again, late
		"leased":    {Status: "published", Detail: "12:00:09"},       // the other's lease overwritten
		"held":      {Status: "pending", Owner: "held", Detail: "1"}, // a failure counted under another's lock
		"released":  {Status: "published", Detail: "12:00:09"},       // taken after the database ended the lock
		"same":      {Status: "published", Detail: "12:00:02"},
		"new":       {Status: "pending", Owner: "t-mine"},
	}
	if diff := cmp.Diff([]string{"gone", "held", "leased", "published"}, changedRows(before, after)); diff != "" {
		t.Errorf("changed rows (-want +got):\n%s", diff)
	}
	if got := changedRows(before, before); len(got) != 0 {
		t.Errorf("changed rows of an unchanged outbox = %v, want none", got)
	}
}

// The late outcomes are the relay's outcome lines inside the windows, and only those.
func TestLateOutcomes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "api.log")
	log := `{"time":"2026-12-01T12:00:00Z","level":"WARN","msg":"Kafka unavailable; relay backs off, events stay pending","component":"outbox_relay","events":9}
{"time":"2026-12-01T12:00:11Z","level":"WARN","msg":"lease expired before the batch was recorded; its events will be published again","component":"outbox_relay","events":3}
{"time":"2026-12-01T12:00:12Z","level":"WARN","msg":"Kafka unavailable; relay backs off, events stay pending","component":"outbox_relay","events":2}
{"time":"2026-12-01T12:00:12Z","level":"INFO","msg":"relay started","component":"outbox_relay"}
{"time":"2026-12-01T12:00:12Z","level":"WARN","msg":"write response","component":"payment","events":4}
{"time":"2026-12-01T12:00:30Z","level":"WARN","msg":"lease expired before the batch was recorded; its events will be published again","component":"outbox_relay","events":5}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	late, fenced := lateOutcomes(path, [][2]time.Time{{start, start.Add(4 * time.Second)}})
	if late != 5 || fenced != 3 {
		t.Errorf("lateOutcomes = %d late, %d fenced; want 5 and 3", late, fenced)
	}
	if late, _ := lateOutcomes(filepath.Join(t.TempDir(), "missing.log"), nil); late != -1 {
		t.Errorf("lateOutcomes of a missing log = %d, want -1", late)
	}
}

// The second read compares the rows of the first, whatever the time: a row under the
// other replica's lease that is untouched must not count as changed because its lease,
// live for more than the margin at the first read, has less than the margin left at
// the second: counted, such rows would make replica-pause FAIL a correct relay.
func TestUntouchedRowsStayUnchangedWhileTheirLeaseRunsDown(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(t.Context()) })
	// A student's layout: leases in columns, published rows marked in place.
	_, err = conn.Exec(t.Context(), `
		DROP TABLE outbox_published;
		ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_status_check,
			ADD COLUMN published_at timestamptz, ADD COLUMN lease_token uuid, ADD COLUMN lease_expires_at timestamptz`)
	if err != nil {
		t.Fatalf("lease layout: %v", err)
	}
	// One row of the other replica, 1 s beyond the margin; one published row.
	_, err = conn.Exec(t.Context(), `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, lease_token, lease_expires_at)
		VALUES (gen_random_uuid(), 'PaymentCreated', 'p1', '{}', gen_random_uuid(), now() + $1 * interval '1 second');
		`, (untouchableLeaseMargin + time.Second).Seconds())
	if err != nil {
		t.Fatalf("insert leased row: %v", err)
	}
	_, err = conn.Exec(t.Context(), `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, status, published_at)
		VALUES (gen_random_uuid(), 'PaymentCreated', 'p2', '{}', 'published', now())`)
	if err != nil {
		t.Fatalf("insert published row: %v", err)
	}
	before, err := untouchableRows(t.Context(), dbURL)
	if err != nil || len(before) != 2 {
		t.Fatalf("untouchableRows = %v, %v; want both rows", before, err)
	}
	// Time passes: the lease now has less than the margin left. lease_expires_at is not
	// part of a row's compared state, so moving it changes nothing the comparison sees.
	if _, err := conn.Exec(t.Context(), `UPDATE outbox_events SET lease_expires_at = now() + $1 * interval '1 second' WHERE aggregate_id = 'p1'`,
		(untouchableLeaseMargin - time.Second).Seconds()); err != nil {
		t.Fatalf("run the lease down: %v", err)
	}
	after, err := rowStates(t.Context(), dbURL, before)
	if err != nil {
		t.Fatalf("rowStates: %v", err)
	}
	if changed := changedRows(before, after); len(changed) != 0 {
		t.Errorf("changed rows = %v, want none: nothing touched them", changed)
	}
	// And a touched one is seen: the other's lease overwritten.
	if _, err := conn.Exec(t.Context(), `UPDATE outbox_events SET lease_token = gen_random_uuid() WHERE aggregate_id = 'p1'`); err != nil {
		t.Fatalf("overwrite lease: %v", err)
	}
	after, err = rowStates(t.Context(), dbURL, before)
	if err != nil {
		t.Fatalf("rowStates: %v", err)
	}
	if changed := changedRows(before, after); len(changed) != 1 {
		t.Errorf("changed rows = %v, want the row whose lease was overwritten", changed)
	}
}

// Our layout: the other replica's rows are locked by its batch's transaction, and
// published events are in outbox_published. Untouched rows stay unchanged; a row
// changed under the other's lock is seen; a row the lock no longer holds afterwards is
// not judged (the database may have ended the frozen replica's transaction).
func TestUntouchableRowsOfBatchTransactions(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		VALUES (gen_random_uuid(), 'PaymentCreated', 'held', '{}'), (gen_random_uuid(), 'PaymentCreated', 'free', '{}');
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at)
		VALUES (gen_random_uuid(), 1, 'PaymentCreated', 'published', '{}', 0, 0, now())`)
	if err != nil {
		t.Fatalf("insert rows: %v", err)
	}
	// The other replica's batch: a transaction that locked the row 'held'.
	batch, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = batch.Rollback(context.Background()) })
	if _, err := batch.Exec(ctx, `SELECT 1 FROM outbox_events WHERE aggregate_id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	before, err := untouchableRows(ctx, dbURL)
	if err != nil {
		t.Fatalf("untouchableRows: %v", err)
	}
	owners := map[string]int{}
	for _, s := range before {
		owners[s.Status+"/"+s.Owner]++
	}
	if diff := cmp.Diff(map[string]int{"published/": 1, "pending/held": 1}, owners); diff != "" {
		t.Errorf("untouchable rows by status/owner (-want +got):\n%s", diff)
	}
	after, err := rowStates(ctx, dbURL, before)
	if err != nil {
		t.Fatalf("rowStates: %v", err)
	}
	if changed := changedRows(before, after); len(changed) != 0 {
		t.Errorf("changed rows = %v, want none: nothing touched them", changed)
	}
	// A late outcome under the other's lock is seen.
	if _, err := batch.Exec(ctx, `UPDATE outbox_events SET attempts = attempts + 1 WHERE aggregate_id = 'held'`); err != nil {
		t.Fatal(err)
	}
	if err := batch.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	relocked, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relocked.Exec(ctx, `SELECT 1 FROM outbox_events WHERE aggregate_id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	after, err = rowStates(ctx, dbURL, before)
	if err != nil {
		t.Fatalf("rowStates: %v", err)
	}
	if changed := changedRows(before, after); len(changed) != 1 {
		t.Errorf("changed rows = %v, want the row changed while held", changed)
	}
	// Released: the same change is no longer judged.
	if err := relocked.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	after, err = rowStates(ctx, dbURL, before)
	if err != nil {
		t.Fatalf("rowStates: %v", err)
	}
	if changed := changedRows(before, after); len(changed) != 0 {
		t.Errorf("changed rows = %v, want none once the lock is gone", changed)
	}
}

// The resume of a paused replica opens the windows in which its log lines count
// (aloneWindows, unfencedAfterResume), so it must be recorded before the replica can
// write anything: while it is still stopped. Recorded after the SIGCONT, it can let the
// CDC relay's "replication stream lost" fall just before its window.
func TestResumeAloneRecordsWhileStopped(t *testing.T) {
	t.Parallel()
	p := &stack.Process{Name: "api", Argv: []string{"sleep", "300"}, LogPath: filepath.Join(t.TempDir(), "api.log")}
	if err := p.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	pid := p.Pid()
	if err := p.Freeze(); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) { return testenv.ProcState(pid) == "T", "sleep not stopped" })
	states := &stateWhenLogged{pid: pid}
	rn := &harness.Run{Origin: time.Now(), Logger: slog.New(states)}
	if err := resumeAlone(rn, p); err != nil {
		t.Fatalf("resumeAlone: %v", err)
	}
	if diff := cmp.Diff([]string{"T"}, states.seen); diff != "" {
		t.Errorf("state of the process when its resume was recorded (-want +got):\n%s", diff)
	}
	if d := rn.Disruptions(); len(d) != 1 || d[0].What != resumedAlone || d[0].Detail != "api" {
		t.Errorf("disruptions = %+v, want one %q of api", d, resumedAlone)
	}
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) { return testenv.ProcState(pid) != "T", "sleep still stopped" })
}

// stateWhenLogged is a slog.Handler that notes, for each record, the state of process
// pid at that moment: Run.Disrupted logs each disruption as it records it.
type stateWhenLogged struct {
	pid  int
	seen []string
}

func (h *stateWhenLogged) Enabled(context.Context, slog.Level) bool { return true }
func (h *stateWhenLogged) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stateWhenLogged) WithGroup(string) slog.Handler            { return h }

func (h *stateWhenLogged) Handle(context.Context, slog.Record) error {
	h.seen = append(h.seen, testenv.ProcState(h.pid))
	return nil
}
