package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// abuseBundle is a running API on its own database, for the attacks of this file.
type abuseBundle struct {
	base, admin string
	db          *pgx.Conn
}

func setupAbuse(t *testing.T) abuseBundle {
	t.Helper()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	base, stdout, _, _ := startRunWith(t, map[string]string{"DATABASE_URL": dbURL})
	db, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { db.Close(context.WithoutCancel(t.Context())) })
	return abuseBundle{base: base, admin: adminBase(t, stdout), db: db}
}

// rows counts the rows of the tables a request could write.
func (b abuseBundle) rows(t *testing.T) string {
	t.Helper()
	var payments, keys, events int
	err := b.db.QueryRow(t.Context(), `
		SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM idempotency_keys),
		       (SELECT count(*) FROM outbox_events)`).Scan(&payments, &keys, &events)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return fmt.Sprintf("payments=%d idempotency_keys=%d outbox_events=%d", payments, keys, events)
}

// httpSeries counts the series of the http_* metrics on the admin listener.
func (b abuseBundle) httpSeries(t *testing.T) int {
	t.Helper()
	res := httpDo(t, http.MethodGet, b.admin+"/metrics", "", nil)
	n := 0
	for line := range strings.SplitSeq(string(res.Body), "\n") {
		if strings.HasPrefix(line, "http_") {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("GET /metrics: no http_* series; body:\n%s", res.Body)
	}
	return n
}

// randomToken is a method token nobody registered: 12 upper-case letters.
func randomToken(r *rand.Rand) string {
	var b strings.Builder
	for range 12 {
		b.WriteByte(byte('A' + r.IntN(26)))
	}
	return b.String()
}

// Any token is a method to net/http; each must not become a series of its own.
func TestAbuseRandomMethodsAddNoSeries(t *testing.T) {
	t.Parallel()
	b := setupAbuse(t)
	r := rand.New(rand.NewPCG(1, 2))
	// The first odd method creates the one "other" series; no later one may add any.
	// Scraping /metrics is a request too: its own series appear from the second scrape.
	httpDo(t, randomToken(r), b.base+"/payments", "", nil)
	b.httpSeries(t)
	series, rows := b.httpSeries(t), b.rows(t)
	for range 1000 {
		res := httpDo(t, randomToken(r), b.base+"/payments", "", nil)
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("odd method: status %d, want 405", res.StatusCode)
		}
	}
	if got := b.httpSeries(t); got != series {
		t.Errorf("after 1,000 random methods: %d http_* series, want %d as before", got, series)
	}
	if got := b.rows(t); got != rows {
		t.Errorf("after 1,000 random methods: %s, want %s as before", got, rows)
	}
}

// A request whose headers pass MaxHeaderBytes is refused before any handler runs.
func TestAbuseHugeHeaderIs431(t *testing.T) {
	t.Parallel()
	b := setupAbuse(t)
	rows := b.rows(t)
	// Raw HTTP: the server answers 431 and closes while the client may still be
	// writing, which a net/http client reports as a write error, not the status.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.base, "http://"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	body := `{"user_id":"u","amount":1,"currency":"EUR"}`
	fmt.Fprintf(conn, "POST /payments HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nIdempotency-Key: huge-1\r\nX-Filler: %s\r\nContent-Length: %d\r\n\r\n%s",
		strings.Repeat("a", 20<<10), len(body), body)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("20 KiB header: status %d, want 431", res.StatusCode)
	}
	if got := b.rows(t); got != rows {
		t.Errorf("after a 20 KiB header: %s, want %s as before", got, rows)
	}
}
