package replicapause

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// replica-pause with the CDC relay (RELAY_MODE=cdc). The polling relay's premise, rows
// leased by one replica and taken over by the other, has a counterpart here: the slot.
// PostgreSQL lets one replication connection at a time stream from it, so one replica
// streams and the other waits; a frozen streaming relay keeps the slot until the server
// ends its walsender for want of a reply (wal_sender_timeout, 10 s for the run's
// sessions: CDCWalSenderTimeout), and then the other replica takes the slot over and
// streams again from its confirmed position, the frozen one's unconfirmed events
// included (copies). The frozen relay wakes up with outcomes of a session the server
// has ended: Kafka's answers, marks, a position to confirm. They must change nothing:
// its marks move rows the other replica may have moved already, and its confirmation
// goes to a dead connection (the fence: only the slot's live session moves its
// position).
//
// So the harness pauses whichever replica streams (outbox_cdc_streaming on its
// /metrics), with outbox rows pending, for Pause (past the walsender timeout), checks
// that the other replica streams by then, and runs the same comparison as in polling
// mode: the other frozen, the paused one alone for Alone, the published rows unchanged.

// streamingMetric is the CDC relay's gauge that is 1 while it streams from the slot.
const streamingMetric = "outbox_cdc_streaming"

// Disruption names of the CDC variant beyond those of the polling one.
const (
	pausedStreaming = "streaming replica paused (SIGSTOP)"
	slotTakenOver   = "the other replica streams from the slot"
)

// streamLostLog is the message the CDC relay logs when its replication session ends
// (internal/outbox/cdc, Relay.Run): after a pause past the walsender timeout, the proof
// that the server ended the paused relay's session.
const streamLostLog = "replication stream lost; reconnecting"

// pauseStreamingOnce waits for a streaming replica with outbox rows pending, freezes it
// past the walsender timeout, then lets it resume alone and records what its late
// outcomes changed.
func (rp replicaPause) pauseStreamingOnce(ctx context.Context, rn *harness.Run) error {
	var paused, other *stack.Process
	pending := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		paused, other = streamingReplica(ctx, rn)
		if pending = rn.PendingRows(ctx); paused != nil && pending > 0 {
			break
		}
		if err := backoff.Until(ctx, time.Now().Add(50*time.Millisecond)); err != nil {
			return nil
		}
	}
	detail := fmt.Sprintf("neither replica streaming, %d outbox rows pending", pending)
	if paused == nil {
		paused, other = rn.API, rn.Replica // still a pause, which validity does not count
	} else {
		detail = fmt.Sprintf("%s, %d outbox rows pending", paused.Name, pending)
	}
	if err := paused.Freeze(); err != nil {
		return err
	}
	rn.Disrupted(pausedStreaming, detail)
	if err := backoff.Until(ctx, time.Now().Add(rp.Pause)); err != nil {
		return paused.Thaw()
	}
	if streams, _, _ := harness.ScrapeCounter(ctx, other.MetricsBase()+"/metrics", streamingMetric); streams == 1 {
		rn.Disrupted(slotTakenOver, other.Name)
	}
	// As in polling mode: freeze the other, keep what the paused one must not touch,
	// and let the paused one run alone.
	if err := other.Freeze(); err != nil {
		return err
	}
	before, err := untouchableRows(ctx, rn.PaymentsDB)
	if err != nil {
		return err
	}
	if err := resumeAlone(rn, paused); err != nil {
		return err
	}
	waitErr := backoff.Until(ctx, time.Now().Add(rp.Alone))
	if err := paused.Freeze(); err != nil {
		return err
	}
	after, err := rowStates(context.WithoutCancel(ctx), rn.PaymentsDB, before)
	if err == nil {
		rp.late.add(changedRows(before, after))
	}
	if thawErr := paused.Thaw(); thawErr != nil {
		return thawErr
	}
	if thawErr := other.Thaw(); thawErr != nil {
		return thawErr
	}
	rn.Disrupted("both replicas running", "")
	if waitErr != nil {
		return nil
	}
	return err
}

// streamingReplica returns the API process whose relay streams from the slot and the
// other one, or nil and nil when neither says so.
func streamingReplica(ctx context.Context, rn *harness.Run) (streaming, other *stack.Process) {
	for _, pair := range [][2]*stack.Process{{rn.API, rn.Replica}, {rn.Replica, rn.API}} {
		if n, ok, err := harness.ScrapeCounter(ctx, pair[0].MetricsBase()+"/metrics", streamingMetric); err == nil && ok && n == 1 {
			return pair[0], pair[1]
		}
	}
	return nil, nil
}

// sessionsEnded counts, in the log at logPath, the CDC relay's lines saying its
// replication session ended (streamLostLog), written in [from, until). -1 when the
// log cannot be read.
func sessionsEnded(logPath string, from, until time.Time) int {
	f, err := os.Open(logPath)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var entry struct {
			Time      time.Time `json:"time"`
			Msg       string    `json:"msg"`
			Component string    `json:"component"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) != nil || entry.Component != "outbox_cdc_relay" || entry.Msg != streamLostLog {
			continue
		}
		if !entry.Time.Before(from) && entry.Time.Before(until) {
			n++
		}
	}
	return n
}

// validityCDC is validity for the CDC relay: each pause froze the streaming replica
// with rows pending, the other replica took the slot over during it, every paused
// relay found its session ended once it resumed (the server's fence, its own log), and
// its late outcomes changed nothing (the same SLO row as in polling mode).
func (rp replicaPause) validityCDC(r *verdict.Report, rn *harness.Run) []verdict.Check {
	pauses, streamingWithRows, takeovers := 0, 0, 0
	for _, d := range r.Disruptions {
		switch d.What {
		case pausedStreaming:
			pauses++
			if !strings.HasPrefix(d.Detail, "neither") && !strings.Contains(d.Detail, ", 0 outbox rows pending") {
				streamingWithRows++
			}
		case slotTakenOver:
			takeovers++
		}
	}
	unfenced, resumed := unfencedAfterResume(r.Disruptions, rn, time.Now())
	fencedGot := fmt.Sprintf("%d of %d resumed relays", resumed-len(unfenced), resumed)
	if len(unfenced) > 0 {
		fencedGot += "; no such line from " + strings.Join(unfenced, ", ")
	}
	changes := rp.late.all()
	changed := fmt.Sprintf("%d rows changed", len(changes))
	if len(changes) > 0 {
		changed += ", first " + changes[0]
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "streaming replica paused past wal_sender_timeout ("+harness.CDCWalSenderTimeout.String()+") with outbox rows pending (SIGSTOP)", fmt.Sprintf("%d pauses", rp.Pauses),
			fmt.Sprintf("%d pauses, %d of the streaming replica with rows pending", pauses, streamingWithRows), pauses >= rp.Pauses && streamingWithRows > 0),
		verdict.NewCheck(verdict.Validity, "the other replica took the slot over during the pause ("+streamingMetric+")", "> 0",
			fmt.Sprintf("%d of %d pauses", takeovers, pauses), takeovers > 0),
		verdict.NewCheck(verdict.Validity, "every paused relay found its session ended by the server before the next one resumed (its log: "+streamLostLog+")", "all resumed",
			fencedGot, resumed > 0 && len(unfenced) == 0),
		verdict.NewCheck(verdict.Validity, "the service's own copies in the topic (the other replica streamed the paused one's events again)", "> 0", r.Evidence.ServiceCopies, r.Evidence.ServiceCopies > 0),
		harness.OrderInFlightCheck(r),
		verdict.NewCheck(verdict.SLO, "late outcomes of the paused replica changed nothing (published rows)", "0", changed, len(changes) == 0),
	}
}

// unfencedAfterResume counts the resumed relays (resumedAlone disruptions, whose detail
// names the process) and returns those that did not log streamLostLog between their
// resume and the next relay's resume, or end for the last one, each as its name and
// resume time. A relay notices the end of its session only when it next talks to the
// server, which may be after its time alone, but one that has not noticed by the next
// resume still publishes for a session that is over.
func unfencedAfterResume(disruptions []verdict.Disruption, rn *harness.Run, end time.Time) (unfenced []string, resumed int) {
	logs := map[string]string{rn.API.Name: rn.API.LogPath, rn.Replica.Name: rn.Replica.LogPath}
	var starts []verdict.Disruption
	for _, d := range disruptions {
		if d.What == resumedAlone {
			starts = append(starts, d)
		}
	}
	at := func(d verdict.Disruption) time.Time {
		return rn.Origin.Add(time.Duration(d.AtSeconds * float64(time.Second)))
	}
	for i, d := range starts {
		until := end
		if i+1 < len(starts) {
			until = at(starts[i+1])
		}
		if sessionsEnded(logs[d.Detail], at(d), until) <= 0 {
			unfenced = append(unfenced, fmt.Sprintf("%s resumed at %.3f s", d.Detail, d.AtSeconds))
		}
	}
	return unfenced, len(starts)
}
