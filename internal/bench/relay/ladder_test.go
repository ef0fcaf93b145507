package relay

import (
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/outbox/poll"
)

// The "probe all" rung is our claim with one condition taken out by a text replacement:
// if the claim's wording changes, the replacement must not silently leave the claim as it
// is, or the rung would measure ours twice under two names.
func TestProbeAllRungIsOurClaimWithoutTheFlag(t *testing.T) {
	if claimProbingEveryRowSQL == poll.ClaimSQL {
		t.Fatal("claimProbingEveryRowSQL equals poll.ClaimSQL: the replacement no longer matches the claim")
	}
	if strings.Contains(claimProbingEveryRowSQL, "may_have_predecessor") {
		t.Error("claimProbingEveryRowSQL still reads may_have_predecessor")
	}
	// Nothing else differs: putting the flag back gives our claim again.
	restored := strings.Replace(claimProbingEveryRowSQL, "(NOT EXISTS (", "(NOT e.may_have_predecessor OR NOT EXISTS (", 1)
	if restored != poll.ClaimSQL {
		t.Errorf("claimProbingEveryRowSQL with the flag put back differs from poll.ClaimSQL:\n%s", restored)
	}
}
