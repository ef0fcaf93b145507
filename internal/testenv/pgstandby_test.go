package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStandbyTakesOverAfterPromotion: a row the primary committed is on the standby;
// while the primary is down and the standby not yet promoted, a multi-host URL finds no
// server to write to; once promoted, it connects to the standby, which has the row.
func TestStandbyTakesOverAfterPromotion(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := NewPrivatePostgres(t)
	standby := NewPrivateStandby(t, primary)
	url := MultiHostURL("postgres", primary, standby)

	if err := primary.exec(ctx, `CREATE TABLE committed (n int)`, `INSERT INTO committed VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connected through the multi-host URL with the primary down and the standby in recovery, want no server to write to")
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect after the promotion: %v", err)
	}
	defer conn.Close(ctx)
	if got := conn.PgConn().Conn().RemoteAddr().String(); got != standby.Addr {
		t.Errorf("connected to %s, want the promoted standby %s", got, standby.Addr)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM committed`).Scan(&n); err != nil {
		t.Fatalf("read the committed row on the new primary: %v", err)
	}
	if n != 1 {
		t.Errorf("%d committed rows on the new primary, want 1", n)
	}
}
