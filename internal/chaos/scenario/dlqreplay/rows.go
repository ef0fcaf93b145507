package dlqreplay

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// The rows stand on what the harness saw itself, never on the service's metrics: the
// load's requests and answers, the topic as the harness's watch read it, the replays
// the harness sent and their answers, the outbox rows an operator reads, and
// PostgreSQL's own view of who holds the replication slot.

// evidence is what the rows judge, copied out of a run.
type evidence struct {
	origin time.Time
	cdc    bool
	// holder is the first replica's walsender pid (dlqReplay.streamHolder).
	holder  int
	windows []faults.Window
	log     replayLog
	copies  []earlyCopy
	events  []load.CommittedEvent
	// seenS is when each payment's transition first reached the topic, by payment id
	// and sequence, in seconds from origin (the harness's topic watch).
	seenS    map[string]map[int]float64
	topic    verify.TopicContents
	topicErr error
}

// validity is the scenario's rows: validity first, then its own SLO row.
func (d *dlqReplay) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	d.mu.Lock()
	e := evidence{
		origin: rn.Origin, cdc: rn.RelayMode == verdict.RelayModeCDC, holder: d.streamHolder,
		windows: slices.Clone(d.windows), events: d.loadEvents, topic: d.topic, topicErr: d.topicErr, copies: slices.Clone(d.copies),
		log: replayLog{deadLetters: maps.Clone(d.replays.deadLetters), replays: slices.Clone(d.replays.replays)},
	}
	d.mu.Unlock()
	if r.Evidence != nil {
		e.seenS = r.Evidence.TransitionSeenS
	}
	return e.rows(rn.API.Name, rn.Replica.Name)
}

// rows are the verdict's rows of e; first and second name the replicas.
func (e evidence) rows(first, second string) []verdict.Check {
	return []verdict.Check{
		e.windowsCheck(),
		e.replaysDuringLoadCheck(second),
		e.streamHolderCheck(first, second),
		e.committedMeanwhileCheck(),
		e.committedAfterReplayCheck(second),
		e.earlyCopiesCheck(),
		e.deliveredCheck(),
	}
}

// seen returns when the harness first saw the payment's transition in the topic.
func (e evidence) seen(paymentID string, sequence int) (float64, bool) {
	s, ok := e.seenS[paymentID][sequence]
	return s, ok
}

// at turns seconds from the run's start into a time.
func (e evidence) at(s float64) time.Time {
	return e.origin.Add(time.Duration(s * float64(time.Second)))
}

// replayedOK says whether the harness replayed eventID and was answered 200.
func (e evidence) replayedOK(eventID string) bool {
	return slices.ContainsFunc(e.log.replays, func(r replay) bool { return r.EventID == eventID && r.Err == "" })
}

// windowsCheck: each window dead-lettered events, as the harness saw them: events the
// API committed inside the window (sent after it opened, answered before it closed)
// that reached the topic only after it closed, once the harness had replayed them.
func (e evidence) windowsCheck() verdict.Check {
	const name = "each refusal window dead-lettered events: committed in it, in the topic only after it and their replay (load, topic, replays)"
	var per []string
	each := len(e.windows) > 0
	for _, w := range e.windows {
		n := 0
		for _, ev := range e.events {
			seen, ok := e.seen(ev.PaymentID, ev.Sequence)
			if w.EndS >= 0 && !ev.Sent.Before(e.at(w.StartS)) && !ev.At.After(e.at(w.EndS)) && ok && seen > w.EndS && e.replayedOK(ev.EventID) {
				n++
			}
		}
		per = append(per, fmt.Sprint(n))
		each = each && n > 0
	}
	return verdict.NewCheck(verdict.Validity, name, "> 0 in every window", fmt.Sprintf("per window: %s", strings.Join(per, ", ")), each)
}

// replaysDuringLoadCheck: the harness replayed dead letters while the load was still
// being sent, through the second replica.
func (e evidence) replaysDuringLoadCheck(second string) verdict.Check {
	during, ok := 0, 0
	for _, r := range e.log.replays {
		if r.Err == "" {
			ok++
			if r.DuringLoad {
				during++
			}
		}
	}
	return verdict.NewCheck(verdict.Validity, "dead letters replayed through "+second+"'s POST /admin/dlq/{event_id}/replay while the load was sent", "> 0",
		fmt.Sprintf("%d (%d replays answered 200 in all, %d sent)", during, ok, len(e.log.replays)), during > 0)
}

// streamHolderCheck: with the CDC relay, every replay went through the second replica
// while the first one's walsender held the slot, as PostgreSQL showed it just before
// each round (pg_replication_slots.active_pid, against the pid noted when the first
// replica alone was running).
func (e evidence) streamHolderCheck(first, second string) verdict.Check {
	name := "replays sent through " + second + " while " + first + "'s session held the replication slot (pg_replication_slots.active_pid)"
	if !e.cdc {
		return verdict.OffCheck(verdict.Validity, name, "every replay", "the polling relay holds no replication stream: both replicas poll")
	}
	held := 0
	for _, r := range e.log.replays {
		if e.holder != 0 && r.Holder == e.holder {
			held++
		}
	}
	return verdict.NewCheck(verdict.Validity, name, "every replay",
		fmt.Sprintf("%d of %d replays (%s's walsender pid %d, noted while it ran alone)", held, len(e.log.replays), first, e.holder),
		len(e.log.replays) > 0 && held == len(e.log.replays))
}

// laterEvents returns the events of the load committed, after the dead letters of
// their payments, in the window that ends when the dead letter reached the topic: sent
// after the harness first saw the dead letter, or after its replay was answered
// (afterReplay), and answered before the topic had the dead letter. Each is an event
// the relay had to hold behind the dead letter (or, with the CDC relay, dead-letter
// behind it) for the payment's order to hold.
func (e evidence) laterEvents(afterReplay bool) (events, payments int) {
	ids, paid := map[string]bool{}, map[string]bool{}
	for id, dead := range e.log.deadLetters {
		seen, ok := e.seen(dead.PaymentID, dead.Sequence)
		if !ok {
			continue // never published: the delivered row fails
		}
		published := e.at(seen)
		from := dead.SeenAt
		if afterReplay {
			from = time.Time{}
			for _, r := range e.log.replays {
				if r.EventID == id && r.Err == "" && r.Answered.Before(published) && r.Answered.After(from) {
					from = r.Answered
				}
			}
			if from.IsZero() {
				continue
			}
		}
		for _, ev := range e.events {
			if ev.PaymentID == dead.PaymentID && ev.Sequence > dead.Sequence && ev.Sent.After(from) && ev.At.Before(published) {
				ids[ev.EventID], paid[ev.PaymentID] = true, true
			}
		}
	}
	return len(ids), len(paid)
}

// committedMeanwhileCheck: a payment got new events between its dead letter and the
// dead letter's publish.
func (e evidence) committedMeanwhileCheck() verdict.Check {
	n, payments := e.laterEvents(false)
	return verdict.NewCheck(verdict.Validity, "events committed after an earlier event of their payment was dead-lettered and before it reached the topic (load's requests, the outbox, topic)", "> 0",
		fmt.Sprintf("%d events of %d payments", n, payments), n > 0)
}

// committedAfterReplayCheck: with the CDC relay, some of those were committed after
// the replay was answered: while the streaming relay had not yet looked for the replay
// made through the other replica, the window in which an event streamed could overtake
// it. The polling relay publishes a replay as soon as the replica that took it is told
// (the replay wakes its relay), so it leaves no such window to aim at.
func (e evidence) committedAfterReplayCheck(second string) verdict.Check {
	name := "of them committed after their dead letter's replay through " + second + " was answered (load's requests, replays, topic)"
	if !e.cdc {
		return verdict.OffCheck(verdict.Validity, name, "> 0", "the polling relay of the replica that takes a replay publishes it at once: no such window")
	}
	n, payments := e.laterEvents(true)
	return verdict.NewCheck(verdict.Validity, name, "> 0", fmt.Sprintf("%d events of %d payments", n, payments), n > 0)
}

// earlyCopiesCheck: the harness's early copies reached the consumer's partition ahead
// of an earlier event of their payment, as the relay's records show it (the topic read
// without the copies): the consumer had an event to park.
func (e evidence) earlyCopiesCheck() verdict.Check {
	ahead, elsewhere := 0, 0
	for _, c := range e.copies {
		for _, ev := range e.topic.PaymentOrder[c.PaymentID] {
			if ev.Sequence >= c.Sequence {
				continue
			}
			if ev.Partition != c.At.Partition {
				elsewhere++
				break
			}
			if ev.Offset > c.At.Offset {
				ahead++
				break
			}
		}
	}
	got := fmt.Sprintf("%d of %d copies", ahead, len(e.copies))
	if elsewhere > 0 {
		got += fmt.Sprintf("; %d on another partition than their payment's events", elsewhere)
	}
	return verdict.NewCheck(verdict.Validity, "early copies the harness published ahead of an earlier event of their payment (topic offsets; the consumer must park them)", "> 0",
		got, ahead > 0 && elsewhere == 0)
}

// deliveredCheck is the scenario's SLO row: every dead letter the harness saw reached
// the topic under its own event id, and every payment with a dead letter has its events
// in the topic in their sequence (first occurrences in offset order).
func (e evidence) deliveredCheck() verdict.Check {
	const name = "every dead letter replayed and in the topic under its own event id, its payment's events in sequence (topic)"
	want := "all dead letters"
	if e.topicErr != nil {
		return verdict.NewCheck(verdict.SLO, name, want, "topic not read: "+e.topicErr.Error(), false)
	}
	missing, outOfOrder := 0, 0
	var first []string
	payments := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(e.log.deadLetters)) {
		dead := e.log.deadLetters[id]
		payments[dead.PaymentID] = true
		if e.topic.EventCopies[id] == 0 {
			missing++
			if len(first) == 0 {
				first = append(first, fmt.Sprintf("first missing: %s (payment %s, sequence %d)", id, dead.PaymentID, dead.Sequence))
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(payments)) {
		if !inSequence(e.topic.PaymentOrder[p]) {
			outOfOrder++
			if outOfOrder == 1 {
				first = append(first, "first out of sequence: payment "+p)
			}
		}
	}
	refused := 0
	for _, r := range e.log.replays {
		if r.Err != "" {
			refused++
			if refused == 1 {
				first = append(first, "first refused replay: "+r.Err)
			}
		}
	}
	got := fmt.Sprintf("%d of %d delivered, %d of %d payments out of sequence; %d replays refused", len(e.log.deadLetters)-missing, len(e.log.deadLetters),
		outOfOrder, len(payments), refused)
	if len(first) > 0 {
		got += "; " + strings.Join(first, "; ")
	}
	return verdict.NewCheck(verdict.SLO, name, want, got, len(e.log.deadLetters) > 0 && missing == 0 && outOfOrder == 0)
}

// inSequence reports whether a payment's events, by first occurrence, come in rising
// sequence.
func inSequence(events []verify.TopicEvent) bool {
	for i := 1; i < len(events); i++ {
		if events[i].Sequence <= events[i-1].Sequence {
			return false
		}
	}
	return true
}
