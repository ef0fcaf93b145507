package harness

import (
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// The dual-write run passes its transitions row when the anti-pattern lost events of
// committed transitions and published none of a transition that was not committed; the
// outbox's run when it lost none.
func TestTransitionsRowOfDualWriteIsInverted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		dualWrite     bool
		lost, phantom int
		wantOK        bool
	}{
		{name: "outbox, nothing lost", wantOK: true},
		{name: "outbox, one lost", lost: 1},
		{name: "outbox, one phantom", phantom: 1},
		{name: "dual write shows its loss", dualWrite: true, lost: 95, wantOK: true},
		{name: "dual write lost nothing: nothing shown", dualWrite: true},
		{name: "dual write invented an event", dualWrite: true, lost: 95, phantom: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &verdict.Report{TransitionsLost: tt.lost, TransitionsPhantom: tt.phantom, Schema: verify.Schema{PaymentLifecycle: true}}
			if got := transitionsCheck(r, tt.dualWrite); got.OK != tt.wantOK || got.Off {
				t.Errorf("row %q: ok %t (off %t), want ok %t; got %q", got.Name, got.OK, got.Off, tt.wantOK, got.Got)
			}
		})
	}
}
