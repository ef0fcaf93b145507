package harness

import (
	"log/slog"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A run whose commits the tap could judge none of (it did not read the protocol the
// group ran) proves nothing about the service: the row is a failed validity row, which
// makes the run INVALID, not FAILED.
func TestNonOwnerRowWithNothingJudgedIsInvalid(t *testing.T) {
	t.Parallel()
	tap := groupwatch.NewTap("127.0.0.1:1", time.Now(), slog.New(slog.DiscardHandler))
	defer tap.Close()
	got := nonOwnerCommitsCheck(&Run{GroupTap: tap, Topic: "t"})
	if got.Kind != verdict.Validity || got.OK {
		t.Fatalf("row with no commit judged: kind %v ok %v, want a failed validity row", got.Kind, got.OK)
	}
}
