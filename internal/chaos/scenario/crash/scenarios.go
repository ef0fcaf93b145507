package crash

import (
	"context"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// Relay is the relay-crash scenario: the API, and its relay with it, SIGKILLed in
// lost-acks windows and restarted. short makes fewer kills, for the CI test.
func Relay(short bool) harness.Scenario {
	// The kills come at random points (see crashes.go). The relay is killed 3.5 s on
	// average into a lost-acks window: past the relay's 3 s publish deadline, so it has
	// claimed, sent and retried a batch the broker wrote.
	relayKills := relayCrashes{Kills: 6, AcksLost: [2]time.Duration{2 * time.Second, 5 * time.Second}, Clean: [2]time.Duration{time.Second, 3 * time.Second}, Watch: 1500 * time.Millisecond, tally: &crashTally{}}
	if short {
		relayKills.Kills = 4
	}
	return harness.Scenario{
		Name:        "relay-crash",
		Description: "the API (and its relay) SIGKILLed at random points of lost-acks windows, " + fmt.Sprint(relayKills.Kills) + " times (each time preferably while the harness has it frozen with a payment committed before its outbox row), and restarted on the same database each time; the rows its dead relay had sent are published again, and the consumer must absorb the copies",
		Span:        20 * time.Second,
		LoadDelay:   time.Second,
		Disrupt:     func(ctx context.Context, rn *harness.Run) error { return crashRelay(ctx, rn, relayKills) },
		// A relay that drains in seconds would end the run before the sixth kill.
		FinishDisruption: true,
		Validity: func(r *verdict.Report, rn *harness.Run) []verdict.Check {
			c := relayKills.tally.read()
			held := "with rows leased"
			if r.RelayMode == verdict.RelayModeCDC {
				held = "with outbox rows pending (the CDC relay leases none; they are its unconfirmed events)"
			}
			inFlight := fmt.Sprintf("%d %s, %d caught with a payment committed before its outbox row", c.APIKillsInFlight, held, c.APIKillsCaught)
			if c.APIKillsInFlight < 0 {
				inFlight = "leases not observable"
			}
			return []verdict.Check{
				verdict.NewCheck(verdict.Validity, "API SIGKILLed and restarted by the harness", fmt.Sprintf(">= %d kills", relayKills.Kills), fmt.Sprintf("%d kills (%s)", c.APIKills, inFlight), c.APIKills >= relayKills.Kills),
				verdict.NewCheck(verdict.Validity, "copies of one event id in the topic (kills during lost acks)", "> 0", r.DuplicatesDelivered, r.DuplicatesDelivered > 0),
				harness.OrderInFlightCheck(r),
			}
		},
	}
}

// Consumer is the consumer-crash scenario: the consumer SIGKILLed between its commit
// and its offsets, and restarted.
func Consumer(bool) harness.Scenario {
	consumerKills := consumerCrashes{Arm: [2]time.Duration{0, time.Second}, Watch: 3 * time.Second, tally: &crashTally{}}
	return harness.Scenario{
		Name: "consumer-crash",
		Description: "the consumer SIGKILLed by the harness at random points while records wait for it, during the load and the drain, and restarted each time; " +
			"from outside, the moment between its database commit and its offset commit is reached only by chance, so the harness freezes it (SIGSTOP) at random instants and kills it when more decisions are committed than records, and counts the records each death left to redeliver; " +
			"our consumer also kills itself there (self-crash knob ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB=0.02, reference service only)",
		// Paced: 100 payments at once are one poll, one commit, one chance. Each
		// death costs the group a session timeout (6 s) before the restarted
		// consumer gets its partitions back, so 30 s leave room for several.
		Span: 30 * time.Second,
		// Small batches make many commits, each a chance; a short session lets the
		// restarted consumer get its partitions back without waiting 45 s for the
		// dead member to time out. Both are optional tuning in the contract.
		ConsumerEnv: []string{"ANTIFRAUD_MAX_POLL_RECORDS=10", "KAFKA_SESSION_TIMEOUT=6s"},
		// About one self-crash in two runs: the lifecycle load makes some 27 batches
		// of 10 (260 events, not 100). At 0.05 a batch the consumer kills itself about
		// 4 times, and their 6 s each leave the harness room for 1 kill of its own
		// (INVALID).
		ReferenceConsumerEnv: []string{"ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB=0.02"},
		Disrupt:              func(ctx context.Context, rn *harness.Run) error { return crashConsumer(ctx, rn, consumerKills) },
		Validity: func(r *verdict.Report, rn *harness.Run) []verdict.Check {
			c := consumerKills.tally.read()
			return []verdict.Check{
				verdict.NewCheck(verdict.Validity, "consumer SIGKILLed and restarted by the harness", ">= 2 kills",
					fmt.Sprintf("%d kills (%d caught between two of its commits); self-crash knob (reference service only): %d", c.ConsumerKills, c.ConsumerKillsCaught, c.ConsumerSelfCrashes),
					c.ConsumerKills >= 2),
				verdict.NewCheck(verdict.Validity, "decided records redelivered after a death (topic offsets re-read)", "> 0",
					fmt.Sprintf("%d records after %d of %d deaths; consumer's own count (processed_events): %d", c.Redelivered, c.DeathsRedelivering, c.ConsumerKills+c.ConsumerSelfCrashes, r.ConsumerDuplicates),
					c.Redelivered > 0),
			}
		},
	}
}
