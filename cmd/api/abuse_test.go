package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	dbURL       string
	// key is an API key of the merchant "test".
	key string
	db  *pgx.Conn
}

func setupAbuse(t *testing.T) abuseBundle {
	t.Helper()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	base, key, stdout, _, _ := startRunWith(t, map[string]string{"DATABASE_URL": dbURL})
	db, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { db.Close(context.WithoutCancel(t.Context())) })
	return abuseBundle{base: base, admin: adminBase(t, stdout), dbURL: dbURL, key: key, db: db}
}

// rows counts the rows of the tables a request could write.
func (b abuseBundle) rows(t *testing.T) string {
	t.Helper()
	var state string
	// Counts, and the payments' state: a transition changes a row without adding one.
	// Events are counted pending and published together: the API's relay moves a row
	// from outbox_events to outbox_published whenever it publishes it.
	err := b.db.QueryRow(t.Context(), `
		SELECT format('payments=%s idempotency_keys=%s transition_keys=%s events=%s states=%s',
		       (SELECT count(*) FROM payments), (SELECT count(*) FROM idempotency_keys),
		       (SELECT count(*) FROM transition_keys),
		       (SELECT count(*) FROM outbox_events) + (SELECT count(*) FROM outbox_published),
		       (SELECT coalesce(string_agg(status || '/' || version, ',' ORDER BY id), '') FROM payments))`).Scan(&state)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return state
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
	fmt.Fprintf(conn, "POST /payments HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nIdempotency-Key: huge-1\r\nX-Filler: %s\r\nContent-Length: %d\r\n\r\n%s",
		b.key, strings.Repeat("a", 20<<10), len(body), body)
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

// paymentRoutes are every verb on a payment, for the authorization attacks.
func paymentRoutes(id string) []struct{ method, path, body string } {
	return []struct{ method, path, body string }{
		{http.MethodGet, "/payments/" + id, ""},
		{http.MethodPost, "/payments/" + id + "/capture", ""},
		{http.MethodPost, "/payments/" + id + "/refund", ""},
		{http.MethodPost, "/payments/" + id + "/cancel", ""},
	}
}

// create makes a payment as the holder of key and returns its id.
func (b abuseBundle) create(t *testing.T, key string) string {
	t.Helper()
	res := httpDo(t, http.MethodPost, b.base+"/payments", `{"user_id":"u-1","amount":100,"currency":"EUR"}`,
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + key})
	var p struct {
		ID string `json:"id"`
	}
	if res.StatusCode != http.StatusCreated || json.Unmarshal(res.Body, &p) != nil || p.ID == "" {
		t.Fatalf("POST /payments: %d %s, want 201 with an id", res.StatusCode, res.Body)
	}
	return p.ID
}

// wantError checks an answer's status and that its body is the API's error shape with
// code.
func wantError(t *testing.T, what string, res response, status int, code string) {
	t.Helper()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if res.StatusCode != status || json.Unmarshal(res.Body, &body) != nil || body.Error.Code != code || body.Error.Message == "" {
		t.Errorf("%s: %d %s, want %d with error code %q", what, res.StatusCode, res.Body, status, code)
	}
}

// Without a key, with a wrong one or a revoked one, every payment route is 401 and
// writes nothing.
func TestAbuseWithoutAValidKeyIs401(t *testing.T) {
	t.Parallel()
	b := setupAbuse(t)
	id := b.create(t, b.key)
	revoked := createKey(t, b.dbURL, "revoked")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"api", "keys", "revoke", revoked.ID.String()}, func(k string) string {
		return map[string]string{"DATABASE_URL": b.dbURL}[k]
	}, &out); err != nil {
		t.Fatalf("api keys revoke: %v", err)
	}
	rows := b.rows(t)
	routes := append(paymentRoutes(id), struct{ method, path, body string }{http.MethodPost, "/payments", `{"user_id":"u-1","amount":100,"currency":"EUR"}`})
	for _, cred := range []struct{ name, header string }{
		{"no key", ""},
		{"not a bearer", "Basic " + b.key},
		{"unknown key", "Bearer pok_" + strings.Repeat("A", 26)},
		{"revoked key", "Bearer " + revoked.Key},
	} {
		for _, rt := range routes {
			headers := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k-" + cred.name}
			if cred.header != "" {
				headers["Authorization"] = cred.header
			}
			res := httpDo(t, rt.method, b.base+rt.path, rt.body, headers)
			wantError(t, cred.name+": "+rt.method+" "+rt.path, res, http.StatusUnauthorized, "unauthorized")
		}
	}
	if got := b.rows(t); got != rows {
		t.Errorf("after the unauthenticated requests: %s, want %s as before", got, rows)
	}
}

// Another merchant's payment does not exist for a merchant: 404 on every verb, the
// same answer as for an id nobody has, and the payment is untouched.
func TestAbuseAnotherMerchantsPaymentIs404(t *testing.T) {
	t.Parallel()
	b := setupAbuse(t)
	id := b.create(t, b.key)
	other := createKey(t, b.dbURL, "other")
	rows := b.rows(t)
	for _, rt := range paymentRoutes(id) {
		res := httpDo(t, rt.method, b.base+rt.path, rt.body, map[string]string{"Authorization": "Bearer " + other.Key, "Idempotency-Key": "other-1"})
		wantError(t, "other merchant: "+rt.method+" "+rt.path, res, http.StatusNotFound, "not_found")
	}
	if got := b.rows(t); got != rows {
		t.Errorf("after the other merchant's requests: %s, want %s as before", got, rows)
	}
	// The owner still sees it, so the 404s above were about the merchant.
	if res := httpDo(t, http.MethodGet, b.base+"/payments/"+id, "", bearer(b.key)); res.StatusCode != http.StatusOK {
		t.Errorf("owner: GET /payments/%s = %d, want 200", id, res.StatusCode)
	}
}
