package crash

import (
	"fmt"
	"sync"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// crashCounts count what the crash scenarios did to the services and what each death
// left behind, as the harness saw it from outside.
type crashCounts struct {
	// APIKills counts SIGKILLs of the API; APIKillsInFlight those with outbox rows
	// leased (or locked by a batch) and unpublished at the kill, -1 when they cannot
	// be read (a service that keeps the contract need not have outbox_events); APIKillsCaught those of
	// an API frozen with a payment committed before its outbox row (apiWatch).
	APIKills, APIKillsInFlight, APIKillsCaught int
	// ConsumerKills counts SIGKILLs of the consumer by the harness; ConsumerKillsCaught
	// those of a consumer frozen between a database commit and its offset commit.
	ConsumerKills, ConsumerKillsCaught int
	// ConsumerSelfCrashes counts the consumer's own exits: our consumer's self-crash
	// knob (ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB), the reference service only.
	ConsumerSelfCrashes int
	// Redelivered counts records a restarted consumer was handed again although their
	// payment was already decided, summed over every death; DeathsRedelivering counts
	// the deaths that left at least one.
	Redelivered, DeathsRedelivering int
}

// A crashTally keeps the crashCounts of one run as its kills happen. Safe for
// concurrent use.
type crashTally struct {
	mu     sync.Mutex
	counts crashCounts
}

// recordRelayKill counts one kill of the API with inFlight rows leased (-1: unknown);
// caught says the harness froze it with a payment committed before its outbox row.
func (t *crashTally) recordRelayKill(rn *harness.Run, inFlight int, caught bool) {
	t.mu.Lock()
	t.counts.APIKills++
	if caught {
		t.counts.APIKillsCaught++
	}
	switch {
	case inFlight < 0:
		t.counts.APIKillsInFlight = -1
	case inFlight > 0 && t.counts.APIKillsInFlight >= 0:
		t.counts.APIKillsInFlight++
	}
	t.mu.Unlock()
	detail := fmt.Sprintf("%d rows leased and unpublished; caught with a payment committed before its outbox row: %t", inFlight, caught)
	if inFlight < 0 {
		detail = "leased rows not observable (no outbox_events)"
	}
	rn.Disrupted("SIGKILL api", detail)
}

// recordConsumerDeath counts one death of the consumer and what it left to redeliver.
func (t *crashTally) recordConsumerDeath(rn *harness.Run, d death, redelivered int) {
	t.mu.Lock()
	switch {
	case d.self:
		t.counts.ConsumerSelfCrashes++
	case d.caught:
		t.counts.ConsumerKills++
		t.counts.ConsumerKillsCaught++
	default:
		t.counts.ConsumerKills++
	}
	t.counts.Redelivered += redelivered
	if redelivered > 0 {
		t.counts.DeathsRedelivering++
	}
	t.mu.Unlock()
	what := "SIGKILL consumer"
	if d.self {
		what = "consumer crashed (self-crash knob, reference service only)"
	}
	rn.Disrupted(what, fmt.Sprintf("restarted; %d decided records past the committed offsets, redelivered; caught between two of its commits: %t", redelivered, d.caught))
}

// read returns the counts so far.
func (t *crashTally) read() crashCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}
