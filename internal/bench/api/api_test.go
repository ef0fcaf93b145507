package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAttackSendsTheKey: every request of the attack carries the API's key, as the
// API wants it; a server that turns away any other request sees none of them.
func TestAttackSendsTheKey(t *testing.T) {
	t.Parallel()
	const key = "test-key"
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer server.Close()
	got, err := attackAPI(apiServer{base: server.URL, key: key}, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("attackAPI: %v", err)
	}
	if got.Created == 0 || got.Errors != 0 {
		t.Errorf("attack: %d created, %d errors; want some created and no error", got.Created, got.Errors)
	}
}
