package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// NewAPIClient is the HTTP client of every request the harness sends to the API under
// test: the load, its lifecycle, the warm-up capture. With a key, each request carries
// it as "Authorization: Bearer <key>"; a student's service gets the key of -api-key,
// none by default (authentication is a MAY of docs/contract.md).
func NewAPIClient(timeout time.Duration, key string) *http.Client {
	client := &http.Client{Timeout: timeout}
	if key != "" {
		client.Transport = bearer{key: key, next: http.DefaultTransport}
	}
	return client
}

// bearer adds the API key to each request it carries.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (b bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// CreateAPIKey makes a key for our API with its own command, "api keys create", on the
// run's payments database, before the API starts: the way an operator makes one.
func CreateAPIKey(ctx context.Context, apiBinary, paymentsDB string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, apiBinary, "keys", "create", "--merchant", "chaos")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+paymentsDB)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("api keys create: %w", err)
	}
	return ParseAPIKey(out)
}

// ParseAPIKey reads the api_key of what "api keys create" printed.
func ParseAPIKey(out []byte) (string, error) {
	var created struct {
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal(out, &created); err != nil || created.Key == "" {
		return "", fmt.Errorf("api keys create printed no api_key (%v)", err)
	}
	return created.Key, nil
}
