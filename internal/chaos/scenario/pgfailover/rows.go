package pgfailover

import (
	"fmt"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// rows are the scenario's validity rows, read from the servers' own answers to the
// watch (pg_is_in_recovery(), the timeline of their WAL) and the harness's own
// steps, then its SLO rows, read from the clients' attempts against the windows in
// which no server answered as the primary.
func (f *failover) rows(r *verdict.Report, _ *harness.Run) []verdict.Check {
	rec := f.read()
	var attempts []verdict.Attempt
	loadStart, loadEnd := 0.0, 0.0
	if r.Evidence != nil {
		attempts, loadStart, loadEnd = r.Evidence.Attempts, r.Evidence.LoadStartS, r.Evidence.LoadEndS
	}
	addr := func(i int) string {
		if i < len(rec.addrs) {
			return rec.addrs[i]
		}
		return "?"
	}
	windows := noPrimary(rec.ticks)
	before, hadPrimary := lastPrimary(rec.ticks, 0, rec.killS)
	promoted, isPromoted := firstPrimary(rec.ticks, 1, rec.killS)
	rebuilt, isRebuilt := firstStandby(rec.ticks, 0, rec.rebuildS)
	back, isBack := firstPrimary(rec.ticks, 0, rec.failbackS)
	// A step not taken leaves its time at 0: nothing after it can have happened.
	isPromoted = isPromoted && rec.killS > 0 && promoted.AtS < rec.rebuildS
	isRebuilt = isRebuilt && rec.rebuildS > 0 && rebuilt.AtS < rec.failbackS
	isBack = isBack && rec.failbackS > 0

	killed := rec.killS > 0 && hadPrimary && rec.killS >= loadStart && rec.killS <= loadEnd
	silent := answers(rec.ticks, 0, rec.killS, rec.rebuildS)
	oldTimeline := before.Nodes[0].Timeline
	newTimeline := promoted.Nodes[1].Timeline
	backTimeline := back.Nodes[0].Timeline
	inside, outside := refusals(attempts, windows)
	firstS, accepted := firstAcceptedAfter(attempts, rec.killS)
	outage := firstS - rec.killS
	onOld := acceptedBetween(attempts, 0, rec.killS)
	onNew := acceptedBetween(attempts, promoted.AtS, rec.failbackS)
	onBack := acceptedBetween(attempts, back.AtS, loadEnd+1)

	checks := []verdict.Check{
		verdict.NewCheck(verdict.Validity, "primary's postmaster SIGKILLed during the load; its port silent until the rebuild", "during the load, 0 answers",
			fmt.Sprintf("pid %d of %s at %.1f s (load %.1f–%.1f s); %d answers before the rebuild", rec.killedPID, addr(0), rec.killS, loadStart, loadEnd, silent),
			killed && silent == 0),
		verdict.NewCheck(verdict.Validity, "standby promoted: pg_is_in_recovery() false, on a new timeline", fmt.Sprintf("timeline > %d", oldTimeline),
			fmt.Sprintf("%s primary from %.1f s on timeline %d (the old primary wrote %d)", addr(1), promoted.AtS, newTimeline, oldTimeline),
			isPromoted && newTimeline > oldTimeline),
		verdict.NewCheck(verdict.Validity, "old primary rebuilt as the new primary's synchronous standby (pg_stat_replication)", "in recovery, sync",
			fmt.Sprintf("%s in recovery from %.1f s; sync_state %q", addr(0), rebuilt.AtS, rec.syncState),
			isRebuilt && rec.syncState == "sync"),
		verdict.NewCheck(verdict.Validity, "failed back: the rebuilt node primary again, on a newer timeline", fmt.Sprintf("timeline > %d", newTimeline),
			fmt.Sprintf("%s primary from %.1f s on timeline %d", addr(0), back.AtS, backTimeline),
			isBack && backTimeline > newTimeline),
		verdict.NewCheck(verdict.Validity, "payments accepted by each primary: before the kill, after the promotion, after the fail-back", "> 0 each",
			fmt.Sprintf("%d, %d, %d", onOld, onNew, onBack), onOld > 0 && onNew > 0 && onBack > 0),
		verdict.NewCheck(verdict.Validity, "attempts refused while no primary answered (503, transport errors)", "> 0",
			fmt.Sprintf("%d (no primary: %s)", inside, listWindows(windows)), inside > 0),
	}
	if f.Async {
		r.Notes = append(r.Notes, fmt.Sprintf("lesson: with asynchronous replication a COMMIT returns before the standby has its WAL; "+
			"the %d payments answered 201 in the standby's lag were never on the promoted standby, and %d of them were already on the topic, "+
			"so the consumer saw payments that no longer exist. pg-failover, with the standby synchronous, loses none", r.LostNotCommitted, r.Phantom))
		// The lesson's own rows: the loss it shows (harness.lessonChecks) must come from
		// asynchronous replication and a standby that really fell behind.
		checks = append(checks,
			verdict.NewCheck(verdict.Validity, "replication asynchronous at the kill (the primary's synchronous_standby_names)", "''",
				fmt.Sprintf("%q", rec.syncNames), rec.receiverPID > 0 && rec.syncNames == ""),
			verdict.NewCheck(verdict.Validity, "WAL the primary wrote and the promoted standby never received (cut off before the kill)", "> 0 bytes",
				fmt.Sprintf("%d bytes (receiver pid %d)", rec.missingBytes, rec.receiverPID), rec.missingBytes > 0))
	} else {
		checks = append(checks,
			verdict.NewCheck(verdict.SLO, "201 for a payment not on the surviving primary (after the fail-back)", "0", r.LostNotCommitted, r.LostNotCommitted == 0))
	}
	republished := 0
	if r.Evidence != nil {
		republished = r.Evidence.ServiceCopies
	}
	return append(checks,
		// The relay's bookkeeping (its marks, its slot) may be lost with the old primary:
		// it must then publish again, never skip what the surviving primary holds.
		verdict.NewCheck(verdict.SLO, "after the failover the relay only republishes: events it published twice / committed payments and transitions it never published", "any / 0",
			fmt.Sprintf("%d republished / %d payments and %d transitions without their event", republished, r.LostNoEvent, r.TransitionsLost),
			r.LostNoEvent == 0 && r.TransitionsLost == 0),
		verdict.NewCheck(verdict.SLO, fmt.Sprintf("attempts refused while a primary answered (outside the windows, +%s)", refusalGrace), "0",
			fmt.Sprintf("%d of %d refused", outside, inside+outside), outside == 0),
		verdict.NewCheck(verdict.SLO, "outage: from the kill to the first 201 of an attempt sent after it", fmt.Sprintf("<= %s", f.OutageBudget),
			outageGot(outage, accepted), accepted && rec.killS > 0 && outage <= f.OutageBudget.Seconds()),
	)
}

func outageGot(outage float64, accepted bool) string {
	if !accepted {
		return "no 201 after the kill"
	}
	return fmt.Sprintf("%.1f s", outage)
}
