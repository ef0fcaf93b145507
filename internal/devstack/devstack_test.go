package devstack

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/repo"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestKafkaBrokersFromEnvironment(t *testing.T) {
	t.Parallel()
	getenv := func(string) string { return " 10.0.0.1:9092, ,10.0.0.2:9092 " }
	got, err := KafkaBrokers(getenv)
	if err != nil {
		t.Fatalf("KafkaBrokers: %v", err)
	}
	if diff := cmp.Diff([]string{"10.0.0.1:9092", "10.0.0.2:9092"}, got); diff != "" {
		t.Errorf("brokers mismatch (-want +got):\n%s", diff)
	}
}

func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	got, err := DatabaseURL("postgres://u:p@db:5432/postgres?sslmode=disable", "other")
	if err != nil {
		t.Fatalf("DatabaseURL: %v", err)
	}
	if want := "postgres://u:p@db:5432/other?sslmode=disable"; got != want {
		t.Errorf("DatabaseURL = %q, want %q", got, want)
	}
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := UniqueName("bench_db_"), UniqueName("bench_db_")
	if a == b {
		t.Errorf("two UniqueName calls both gave %q", a)
	}
	if !strings.HasPrefix(a, "bench_db_") || len(a) != len("bench_db_")+8 {
		t.Errorf("UniqueName = %q, want bench_db_ and 8 hex digits", a)
	}
}

// TestRunScriptReportsFailures checks both outcomes on the live stack: a verb that
// works returns the script's output, a bad verb an error carrying the usage line.
func TestRunScriptReportsFailures(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := LoadPorts(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	out, err := RunScript(t.Context(), root, "postgres.sh", "url")
	if err != nil {
		t.Fatalf("postgres.sh url: %v", err)
	}
	if out != ports.AdminURL() {
		t.Errorf("postgres.sh url = %q, want %q", out, ports.AdminURL())
	}
	if _, err := RunScript(t.Context(), root, "postgres.sh", "no-such-verb"); err == nil || !strings.Contains(err.Error(), "usage:") {
		t.Errorf("postgres.sh no-such-verb: got err %v, want one quoting the usage line", err)
	}
}

// TestDatabaseLifecycle walks the path of a test database: template, clone, use, drop.
func TestDatabaseLifecycle(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin, err := PostgresURL(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}

	template, err := EnsureTemplate(ctx, admin, migrations.Payments)
	if err != nil {
		t.Fatalf("EnsureTemplate: %v", err)
	}
	again, err := EnsureTemplate(ctx, admin, migrations.Payments)
	if err != nil || again != template {
		t.Fatalf("EnsureTemplate again = %q, %v; want %q, nil", again, err, template)
	}
	name := UniqueName("devstack_test_")
	dbURL, err := CloneDatabase(ctx, admin, name, template)
	if err != nil {
		t.Fatalf("CloneDatabase: %v", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to the clone: %v", err)
	}
	var payments int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&payments)
	// Left open on purpose: DropDatabase must end it (WITH (FORCE)).
	if err != nil {
		t.Fatalf("the clone has no payments table: %v", err)
	}

	if err := DropDatabase(ctx, admin, name); err != nil {
		t.Fatalf("DropDatabase with a connection open: %v", err)
	}
	if exists := databaseExists(ctx, t, admin, name); exists {
		t.Errorf("database %s exists after DropDatabase", name)
	}
	if err := DropDatabase(ctx, admin, name); err != nil {
		t.Errorf("DropDatabase of a dropped database: got %v, want nil", err)
	}
}

func TestCreateAndMigrateDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin, err := PostgresURL(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	name := UniqueName("devstack_test_")
	dbURL, err := CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	t.Cleanup(func() {
		if err := DropDatabase(context.Background(), admin, name); err != nil {
			t.Error(err)
		}
	})
	if _, err := CreateDatabase(ctx, admin, name); err == nil {
		t.Errorf("CreateDatabase of an existing name: got nil error, want one")
	}
	if err := MigrateDatabase(ctx, dbURL, migrations.Antifraud); err != nil {
		t.Fatalf("MigrateDatabase: %v", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tables int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables < 2 { // at least the goose version table and one of the set's
		t.Errorf("public tables after MigrateDatabase = %d, want at least 2", tables)
	}
}

func TestTopicLifecycle(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	brokers, err := KafkaBrokers(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	name := UniqueName("devstack.test.")
	if err := CreateTopic(ctx, adm, name, 3); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	// No polling here: CreateTopic has already waited for the leaders.
	details, err := adm.ListTopics(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, p := range details[name].Partitions {
		if p.Leader >= 0 {
			leaders++
		}
	}
	if leaders != 3 {
		t.Errorf("partitions with a leader right after CreateTopic = %d, want 3", leaders)
	}
	// On one broker the leaders are there at once, so the check above cannot tell a
	// wait from none. What can fail: the wait counts the partitions that have a leader
	// and keeps waiting, until its deadline, while fewer than asked for have one.
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	err = waitForLeaders(short, adm, name, 4)
	cancelShort()
	if err == nil {
		t.Errorf("waitForLeaders for 4 leaders of a 3-partition topic: got nil error, want it to wait until its deadline")
	}
	if err := CreateTopic(ctx, adm, name, 3); err == nil {
		t.Errorf("CreateTopic of an existing topic: got nil error, want one")
	}
	if err := DeleteTopic(ctx, adm, name); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := DeleteTopic(ctx, adm, name); err == nil {
		t.Errorf("DeleteTopic of a deleted topic: got nil error, want one")
	}
}

func databaseExists(ctx context.Context, t *testing.T, admin, name string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}
