package storm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
)

// The idempotency storm's rows. What a key made is read from outside the service: the
// payments table (the storm's payment n is the only one of user load.StormUser(n), and its
// version counts its transitions) and the topic (each payment's distinct event ids, by
// type). What the clients saw (load.Storm) says which keys were answered, and with
// which ids.

// Names of the storm's SLO rows.
const (
	stormOneRow     = "idempotency storm: keys without exactly one payment (transition) in the database and one event in the topic"
	stormSplitRow   = "idempotency storm: keys whose 201s (200s) named more than one payment (event)"
	stormAnswersRow = "idempotency storm: answers other than 201 (200), 409 with Retry-After, 422, 503 with Retry-After (first attempts and retries)"
)

// stormOutside is what the payments table and the topic hold of the storm.
type stormOutside struct {
	// Payments lists the committed payment ids of each storm user.
	Payments map[string][]string
	// Versions is each storm payment's version; nil without the column.
	Versions map[string]int
	// Events lists each payment's distinct event ids by event type.
	Events map[string]map[string][]string
}

// readStormOutcome reads the storm's payments from the payments database and every
// payment's events from the topic, directly, as the verifier does.
func readStormOutcome(ctx context.Context, paymentsDB string, brokers []string, topic string, lifecycle bool) (stormOutside, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out := stormOutside{Payments: map[string][]string{}, Events: map[string]map[string][]string{}}
	db, err := pgx.Connect(ctx, paymentsDB)
	if err != nil {
		return out, fmt.Errorf("connect to the payments database: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	version := "0"
	if lifecycle {
		version, out.Versions = "version::int", map[string]int{}
	}
	rows, err := db.Query(ctx, `SELECT id::text, user_id::text, `+version+` FROM payments WHERE user_id::text LIKE 'chaos-storm-%'`)
	if err != nil {
		return out, fmt.Errorf("read the storm's payments: %w", err)
	}
	var id, user string
	var v int
	_, err = pgx.ForEachRow(rows, []any{&id, &user, &v}, func() error {
		out.Payments[user] = append(out.Payments[user], id)
		if out.Versions != nil {
			out.Versions[id] = v
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("read the storm's payments: %w", err)
	}
	contents, err := verify.ReadTopic(ctx, brokers, topic)
	if err != nil {
		return out, err
	}
	for payment, events := range contents.PaymentOrder {
		byType := map[string][]string{}
		for _, e := range events {
			byType[e.Type] = append(byType[e.Type], e.EventID)
		}
		out.Events[payment] = byType
	}
	return out, nil
}

// stormEventTypes is the event type each key of a payment makes, by sequence.
var stormEventTypes = map[int]string{1: event.TypePaymentCreated, 2: event.TypePaymentCaptured, 3: event.TypePaymentRefunded}

// judgeStorm judges every key the clients sent against what the database and the
// topic hold.
func judgeStorm(keys []load.StormKey, out stormOutside) verdict.StormOutcome {
	o := verdict.StormOutcome{Keys: len(keys), TransitionsOff: out.Versions == nil}
	// Per payment, the highest sequence a key was sent for and the highest one
	// answered: its version must be the latter, or the former when the key sent last
	// got no answer (it may have committed or not).
	sent, answered := map[string]int{}, map[string]int{}
	for _, k := range keys {
		if k.Sequence > 1 {
			sent[k.PaymentID] = max(sent[k.PaymentID], k.Sequence)
			if k.Succeeded() {
				answered[k.PaymentID] = max(answered[k.PaymentID], k.Sequence)
			}
		}
	}
	for _, k := range keys {
		if ids := distinct(k.IDs); len(ids) > 1 {
			o.Split++
			if o.FirstSplit == "" {
				o.FirstSplit = fmt.Sprintf("key %s answered with %v", k.Key, ids)
			}
		}
		var made, events int
		var what string
		if k.Sequence == 1 {
			o.CreationKeys++
			payments := out.Payments[load.StormUser(k.N)]
			made = len(payments)
			for _, p := range payments {
				events += len(out.Events[p][event.TypePaymentCreated])
			}
			what = fmt.Sprintf("key %s: %d payments %v", k.Key, made, payments)
		} else {
			made = 1 // without the version column only the events are checked
			if !o.TransitionsOff {
				v := out.Versions[k.PaymentID]
				made = stormTransitions(k.Sequence, v, sent[k.PaymentID])
				what = fmt.Sprintf("key %s: payment %s at version %d after keys up to sequence %d (answered up to %d)", k.Key, k.PaymentID, v, sent[k.PaymentID], answered[k.PaymentID])
			}
			events = len(out.Events[k.PaymentID][stormEventTypes[k.Sequence]])
		}
		// A key that no client got answered may have made nothing.
		wantOne := k.Succeeded() || made > 0
		if (wantOne && made != 1) || made > 1 {
			o.NotOne++
			if o.FirstNotOne == "" {
				o.FirstNotOne = what
			}
		}
		if (wantOne && events != 1) || events > 1 {
			o.NotOneEvent++
			if o.FirstNoEvent == "" {
				o.FirstNoEvent = fmt.Sprintf("key %s: %d %s events", k.Key, events, stormEventTypes[k.Sequence])
			}
		}
	}
	return o
}

// stormTransitions is how many transitions the key of sequence seq made, read from its
// payment's version: one if the version reached seq; for the payment's last key, also
// every transition beyond it, which no key asked for.
func stormTransitions(seq, version, sent int) int {
	switch {
	case version < seq:
		return 0
	case seq == sent:
		return 1 + version - seq
	default:
		return 1
	}
}

// distinct returns the non-empty ids, each once, in order.
func distinct(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// stormChecks are the storm's SLO rows; readErr, when the outside could not be read,
// fails the first.
func stormChecks(s *verdict.StormReport, readErr error) []verdict.Check {
	o, a := s.Outcome, s.Answers
	one := fmt.Sprintf("%d without one payment or transition, %d without one event, of %d keys (%d creations)", o.NotOne, o.NotOneEvent, o.Keys, o.CreationKeys)
	var firsts []string
	for _, f := range []string{o.FirstNotOne, o.FirstNoEvent} {
		if f != "" {
			firsts = append(firsts, f)
		}
	}
	if len(firsts) > 0 {
		one += "; first: " + strings.Join(firsts, "; ")
	}
	if o.TransitionsOff {
		one += " (transitions' count not read: no payments.version)"
	}
	if readErr != nil {
		one = "not read: " + readErr.Error()
	}
	split := fmt.Sprintf("%d of %d keys", o.Split, o.Keys)
	if o.FirstSplit != "" {
		split += "; first: " + o.FirstSplit
	}
	answers := fmt.Sprintf("%d of %d attempts (%d 201/200, %d 409 in flight, %d 422, %d 503; %d client timeouts and %d connection errors not answers)",
		a.Wrong, a.Attempts, a.Success, a.InFlight, a.Invalid, a.Busy, a.Timeouts, a.ConnErrors)
	if len(a.FirstWrong) > 0 {
		answers += "; first: " + strings.Join(a.FirstWrong, ", ")
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.SLO, stormOneRow, "0", one, readErr == nil && o.Keys > 0 && o.NotOne+o.NotOneEvent == 0),
		verdict.NewCheck(verdict.SLO, stormSplitRow, "0", split, o.Split == 0),
		verdict.NewCheck(verdict.SLO, stormAnswersRow, "0", answers, a.Wrong == 0),
	}
}
