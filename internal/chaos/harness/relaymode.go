package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/jackc/pgx/v5"
)

// dropReplicationSlots drops the replication slots of database, which the CDC relay
// created (one, named after the database). A slot is server-wide and outlives its
// relay: left behind, it would keep the shared server's WAL for ever. It waits for the
// slot's walsender to end, since a stopped API's server side ends a moment later.
func dropReplicationSlots(ctx context.Context, adminURL, database string, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		logger.Warn("drop the run's replication slots", slog.Any("err", err))
		return
	}
	defer conn.Close(ctx)
	for {
		var active int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active`, database).Scan(&active)
		if err == nil && active == 0 {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, database)
			if err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			logger.Warn("replication slots of the run left behind; drop them by hand",
				slog.String("database", database), slog.Any("err", fmt.Errorf("%d still active: %v", active, err)))
			return
		case <-time.After(200 * time.Millisecond): // a server process ending; no signal to wait on
		}
	}
}

// PrintRelayModes writes the verdict of each scenario in both relay modes side by side
// (make chaos-all): the same faults, the same SLOs and validity rules, two relays.
// reports maps a relay mode to its reports by scenario name; a scenario missing from
// one mode (it could not run) reads "not run". Each row also gives the drain time and
// the events in the topic, the figures that differ most between the modes.
func PrintRelayModes(w io.Writer, names []string, reports map[string]map[string]*verdict.Report) {
	fmt.Fprintf(w, "\nevery scenario, polling relay beside CDC relay:\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tPOLL\tCDC\tDRAIN S (POLL / CDC)\tEVENTS IN TOPIC (POLL / CDC)")
	cell := func(r *verdict.Report, f func(*verdict.Report) string) string {
		if r == nil {
			return "not run"
		}
		return f(r)
	}
	verdictOf := func(r *verdict.Report) string { return r.Verdict() }
	drain := func(r *verdict.Report) string { return fmt.Sprintf("%.1f", r.DrainSeconds) }
	events := func(r *verdict.Report) string { return fmt.Sprint(r.EventsInTopic) }
	for _, name := range names {
		poll, cdc := reports[verdict.RelayModePoll][name], reports[verdict.RelayModeCDC][name]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s / %s\t%s / %s\n", name, cell(poll, verdictOf), cell(cdc, verdictOf),
			cell(poll, drain), cell(cdc, drain), cell(poll, events), cell(cdc, events))
	}
	tw.Flush()
}
