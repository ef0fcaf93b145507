package load

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStormAnswersCountsWhatTheContractForbids(t *testing.T) {
	t.Parallel()
	var a StormAnswers
	for _, at := range []stormAttempt{
		{status: http.StatusCreated}, {status: http.StatusOK},
		{status: http.StatusConflict, retryAfter: time.Second},
		{status: http.StatusUnprocessableEntity},
		{status: http.StatusServiceUnavailable, retryAfter: time.Second},
		{timedOut: true}, {},
		{status: http.StatusConflict},
		{status: http.StatusServiceUnavailable},
		{status: http.StatusInternalServerError},
		{status: http.StatusNotFound},
	} {
		a.record("POST", "/payments/p1/capture", at)
	}
	want := StormAnswers{Attempts: 11, Success: 2, InFlight: 1, Invalid: 1, Busy: 1, Timeouts: 1, ConnErrors: 1, Wrong: 4,
		FirstWrong: []string{"409 without Retry-After POST /payments/{id}/capture", "503 without Retry-After POST /payments/{id}/capture", "500 POST /payments/{id}/capture"}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("StormAnswers (-want +got):\n%s", diff)
	}
}
