package load

import (
	"net/http"
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
