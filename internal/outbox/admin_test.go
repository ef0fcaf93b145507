package outbox

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAdminHandlerRequiresToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, configured, sent string
		want                   int
	}{
		{"disabled without a configured token", "", "", http.StatusNotFound},
		{"disabled even with a bearer", "", "anything", http.StatusNotFound},
		{"missing token", "secret", "", http.StatusUnauthorized},
		{"wrong token", "secret", "guess", http.StatusUnauthorized},
		{"right token", "secret", "secret", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(b.adminHandler(tt.configured, func() {}))
			defer srv.Close()
			if got := adminRequest(t, srv.URL, http.MethodGet, "/admin/dlq", tt.sent).StatusCode; got != tt.want {
				t.Errorf("GET /admin/dlq: status %d, want %d", got, tt.want)
			}
		})
	}
	srv := httptest.NewServer(b.adminHandler("secret", func() {}))
	defer srv.Close()
	if got := adminRequest(t, srv.URL, http.MethodPost, "/admin/dlq/"+newMessage(t, "x", 0).ID.String()+"/replay", "secret").StatusCode; got != http.StatusNotFound {
		t.Errorf("replay of an unknown event: status %d, want 404", got)
	}
}

// adminHandler mounts the admin endpoints the way cmd/api does, minus its router.
func (b *testBundle) adminHandler(token string, notify func()) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /admin/dlq", NewDLQ(b.pool, b.logger).HandleList())
	mux.Handle("POST /admin/dlq/{event_id}/replay", NewDLQ(b.pool, b.logger).HandleReplay(notify))
	return RequireBearerToken(token)(mux)
}

func adminRequest(t *testing.T, base, method, path, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
