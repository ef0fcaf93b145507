package chaos

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Answers5xxRow names the SLO row that counts every 5xx answer but 503. A retry hides a
// 500 from the load's totals (the retried request may well succeed), so the load counts
// every attempt's answer, first attempts and retries, creations and transitions. 503
// with Retry-After is the contract's answer while the database is down and stays out;
// a 503 without Retry-After is a 5xx the contract does not allow and counts. The
// dual-write handler answers 201 when its publish fails, so its run wants 0 as well.
const Answers5xxRow = "answers 5xx other than 503 (first attempts and retries)"

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

// serverErrorsCheck is Answers5xxRow.
func serverErrorsCheck(r *Report) Check {
	got := fmt.Sprint(r.ServerErrors.Count)
	if len(r.ServerErrors.First) > 0 {
		got += " (first: " + strings.Join(r.ServerErrors.First, ", ") + ")"
	}
	return check(SLO, Answers5xxRow, "0", got, r.ServerErrors.Count == 0)
}
