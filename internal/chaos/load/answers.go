package load

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// answersShown is how many 5xx answers the row names.
const answersShown = 3

// An answerLog counts the answers of every attempt the load made, through the
// transport of its HTTP client, so that no code path of the load can skip it.
type answerLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	// serverErrors counts the 5xx answers but 503 with Retry-After; first lists the
	// first few as "status METHOD endpoint".
	serverErrors int
	first        []string
}

func (l *answerLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 500 {
		return resp, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
		return resp, err
	}
	status := fmt.Sprint(resp.StatusCode)
	if resp.StatusCode == http.StatusServiceUnavailable {
		status += " without Retry-After"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.serverErrors++
	if len(l.first) < answersShown {
		l.first = append(l.first, status+" "+req.Method+" "+endpoint(req.URL.Path))
	}
	return resp, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (l *answerLog) CloseIdleConnections() {
	if c, ok := l.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// endpoint is a request's path with the payment id replaced, e.g.
// /payments/{id}/capture.
func endpoint(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) >= 2 && parts[0] == "payments" {
		parts[1] = "{id}"
	}
	return "/" + strings.Join(parts, "/")
}

// ServerErrors is what the load saw of 5xx answers (Answers5xxRow).
type ServerErrors struct {
	Count int      `json:"count"`
	First []string `json:"first,omitempty"`
}

func (l *answerLog) result() ServerErrors {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ServerErrors{Count: l.serverErrors, First: l.first}
}
