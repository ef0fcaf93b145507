package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/jackc/pgx/v5"
)

// HealthyPublishS is how long after its 201 a payment's event may take to reach the
// topic without any fault. An event accepted closer than this to the end of a window
// is not counted as held back by it: it may simply have been on its way. The reference
// relay publishes within milliseconds of the commit (it is woken by it); the contract
// lets a relay poll every second.
const HealthyPublishS = 2.0

// collectEvidence stops the watch and gathers the evidence of the run into the report,
// with notes that put the service's own view of its failures beside it. Call it after
// the drain and before the verifier reads the topic, so that no copy is injected while
// the verifier counts.
func collectEvidence(ctx context.Context, rn *Run, report *verdict.Report, watch *faults.TopicWatch, res load.Result) {
	if err := watch.CatchUp(ctx, 10*time.Second); err != nil {
		report.Notes = append(report.Notes, err.Error())
	}
	seen := watch.Stop()
	ev := &verdict.Evidence{
		EventsSeen: seen.Events, InjectedCopies: seen.InjectedCopies, ServiceCopies: seen.ServiceCopies,
		LoadStartS: res.Started.Sub(rn.Origin).Seconds(), LoadEndS: res.Ended.Sub(rn.Origin).Seconds(),
		ClientRetries: res.RetryReasons,
		AcceptedS:     map[string]float64{}, FirstSeenS: seen.FirstSeenS, TransitionSeenS: seen.TransitionSeenS, Partition: seen.Partition,
	}
	for i, id := range res.PaymentIDs {
		ev.AcceptedS[id] = res.AcceptedAt[i].Sub(rn.Origin).Seconds()
	}
	for _, a := range res.Attempts {
		ev.Attempts = append(ev.Attempts, verdict.Attempt{SentS: a.Sent.Sub(rn.Origin).Seconds(), AnsweredS: a.Answered.Sub(rn.Origin).Seconds(), Refused: a.Refused})
	}
	ev.EventsInFlight, ev.EventsInFlightInFaults = eventsInFlight(res.Events, seen.EventSeenS, rn.Origin, rn.Faults.Windows())
	if started, err := postgresStartedAt(ctx, rn.PaymentsDB); err == nil {
		s := started.Sub(rn.Origin).Seconds()
		ev.PostgresStartS = &s
	} else {
		report.Notes = append(report.Notes, err.Error())
	}
	report.Evidence = ev

	report.Notes = append(report.Notes, fmt.Sprintf("topic, as the harness watched it: %d events; copies injected by the harness: %d, written by the service itself (lost acks): %d",
		seen.Events, seen.InjectedCopies, seen.ServiceCopies))
	if seen.InjectErr != nil {
		report.Notes = append(report.Notes, "injecting copies failed: "+seen.InjectErr.Error())
	}
	if failures, ok := rn.FailedPublishAttempts(); ok {
		report.Notes = append(report.Notes, fmt.Sprintf("the service's own view, not used for validity: %d failed publish attempts (its own count)", failures))
	} else {
		report.Notes = append(report.Notes, "the service's own view, not used for validity: it exposes no outbox_publish_failures_total")
	}
	if res.Retries > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("the clients retried %d attempts: %s", res.Retries, countList(res.RetryReasons)))
	}
}

// postgresStartedAt asks PostgreSQL when its server process started: a restart shows
// as a start time inside the run, whatever the service says.
func postgresStartedAt(ctx context.Context, dbURL string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return time.Time{}, fmt.Errorf("read pg_postmaster_start_time: %w", err)
	}
	defer conn.Close(ctx)
	var started time.Time
	if err := conn.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&started); err != nil {
		return time.Time{}, fmt.Errorf("read pg_postmaster_start_time: %w", err)
	}
	return started, nil
}

// HeldBack counts the payments of the load that window w kept out of the topic: accepted
// at least HealthyPublishS before w ended, and with no copy in the topic by its end
// (published later, or never). A relay that was not behind the proxy publishes them
// during the window, whatever its timeouts; one behind it cannot, whatever its timeouts.
func HeldBack(e *verdict.Evidence, w faults.Window) int {
	if w.EndS < 0 {
		return 0 // still open: nothing to judge yet
	}
	n := 0
	for id, accepted := range e.AcceptedS {
		if accepted > w.EndS-HealthyPublishS {
			continue
		}
		if first, ok := e.FirstSeenS[id]; !ok || first > w.EndS {
			n++
		}
	}
	return n
}

// writtenDuring counts the payments of the load whose event first reached the topic
// while w was open: with acks dropped, the broker takes the relay's records and only
// the answers are lost.
func writtenDuring(e *verdict.Evidence, w faults.Window) int {
	if w.EndS < 0 {
		return 0
	}
	n := 0
	for id := range e.AcceptedS {
		if first, ok := e.FirstSeenS[id]; ok && first > w.StartS && first <= w.EndS {
			n++
		}
	}
	return n
}

// FaultChecks are the validity rows that each kind of fault did something to the
// service's events, as the topic shows it:
//   - drop_requests and proxy_down hold events back: accepted during or before the
//     window, in the topic only after it;
//   - drop_acks lets the records through and loses the answers: events reach the
//     topic during the window (the relay then publishes again, or its idempotent
//     producer does and the broker drops the copy: both are correct).
//
// Each row gives the count per window, so a kind whose first window missed is visible.
func FaultChecks(r *verdict.Report, kinds ...faults.Kind) []verdict.Check {
	ev := r.Evidence
	var checks []verdict.Check
	for _, kind := range kinds {
		name := fmt.Sprintf("events held back by %s windows (topic)", kind)
		measure := HeldBack
		if kind == faults.DropAcks {
			name = "events written during drop_acks windows, answers dropped (topic)"
			measure = writtenDuring
		}
		total, per, probesHeld := 0, []string{}, 0
		for _, w := range r.FaultWindows {
			if w.Kind != kind {
				continue
			}
			n := measure(ev, w)
			total += n
			per = append(per, fmt.Sprint(n))
			if w.Probe == faults.ProbeRefused || w.Probe == faults.ProbeNoAnswer {
				probesHeld++
			}
		}
		got := fmt.Sprintf("%d (per window: %s)", total, strings.Join(per, ", "))
		if total == 0 && probesHeld > 0 && kind != faults.DropAcks {
			// The fault was in force, as the harness's own client saw it, and the
			// service's events went through anyway.
			got += "; the proxy held the harness's probe, so the service's relay is not behind it"
		}
		checks = append(checks, verdict.NewCheck(verdict.Validity, name, "> 0", got, total > 0))
	}
	return checks
}

// ProbeCheck is the validity row that Toxiproxy applied every fault: in each probed
// window, a client of the harness's own found the proxy refusing or silent. Without it
// a run would blame the service for a fault that never happened.
func ProbeCheck(r *verdict.Report) verdict.Check {
	probed, held := 0, 0
	var seen []string
	for _, w := range r.FaultWindows {
		if w.Probe == "" {
			continue
		}
		probed++
		if w.Probe == faults.ProbeRefused || w.Probe == faults.ProbeNoAnswer {
			held++
		}
		seen = append(seen, w.Probe)
	}
	return verdict.NewCheck(verdict.Validity, "the proxy applied each fault (the harness's own probe)", "refused or no answer in every window",
		strings.Join(seen, ", "), probed > 0 && held == probed)
}

// HeldBackCheck is the validity row of the dual-write run: the faults kept some
// accepted payments' events out of the topic, for a while or for good.
func HeldBackCheck(r *verdict.Report) verdict.Check {
	total := 0
	for _, w := range r.FaultWindows {
		total += HeldBack(r.Evidence, w)
	}
	return verdict.NewCheck(verdict.Validity, "events held back or lost by the fault windows (topic)", "> 0", total, total > 0)
}

// InjectedCheck is the validity row that the consumer's dedup was exercised: the
// harness's own copies, whatever the relay wrote.
func InjectedCheck(r *verdict.Report) verdict.Check {
	return verdict.NewCheck(verdict.Validity, "copies injected by the harness (consumer dedup exercised)", "> 0",
		fmt.Sprintf("%d (the service's own copies: %d)", r.Evidence.InjectedCopies, r.Evidence.ServiceCopies), r.Evidence.InjectedCopies > 0)
}

// PostgresRestartCheck is the validity row that PostgreSQL really restarted while the
// load ran, by PostgreSQL's own clock.
func PostgresRestartCheck(r *verdict.Report) verdict.Check {
	ev := r.Evidence
	if ev.PostgresStartS == nil {
		return verdict.NewCheck(verdict.Validity, "PostgreSQL restarted during the load (pg_postmaster_start_time)", "inside the load", "unknown", false)
	}
	started := *ev.PostgresStartS
	during := started > ev.LoadStartS && started < ev.LoadEndS
	return verdict.NewCheck(verdict.Validity, "PostgreSQL restarted during the load (pg_postmaster_start_time)",
		fmt.Sprintf("between %.1f s and %.1f s", ev.LoadStartS, ev.LoadEndS), fmt.Sprintf("%.1f s", started), during)
}

// countList formats counts by reason, largest first: "status 503 ×12, transport error ×2".
func countList(counts map[string]int) string {
	reasons := slices.Collect(maps.Keys(counts))
	slices.SortFunc(reasons, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(reasons))
	for i, reason := range reasons {
		parts[i] = fmt.Sprintf("%s ×%d", reason, counts[reason])
	}
	return strings.Join(parts, ", ")
}
