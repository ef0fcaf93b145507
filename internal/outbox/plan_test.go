package outbox

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
)

// The relay polls a backlog and the cleaner deletes from a history that holds 30 days
// of published events. These tests grow a backlog of 50,000 pending rows and a history
// of 50,000 published ones, and check, with EXPLAIN, that both statements reach their
// rows through the indexes built for them (migrations/payments) instead of scanning a
// table: that is what keeps polling cheap however large the backlog gets, and cleanup
// cheap however long the history.
func TestClaimAndCleanupPlansUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, published_at)
		SELECT gen_random_uuid(), i, 'TestEvent', 'agg-' || i, '{}', 0, 0, at, at
		FROM generate_series(1, 50000) AS i,
		     -- Steady state: published over the last 29 days, and the few rows that
		     -- crossed the 30-day horizon since the cleaner's last pass.
		     LATERAL (SELECT CASE WHEN i <= 50 THEN now() - interval '31 days'
		                          ELSE now() - make_interval(mins => (50000 - i) % (29 * 24 * 60)) END AS at) t
		ORDER BY at`); err != nil {
		t.Fatalf("grow the history: %v", err)
	}
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'TestEvent', 'backlog-' || i, '{}'
		FROM generate_series(1, 50000) AS i`); err != nil {
		t.Fatalf("grow the backlog: %v", err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE outbox_events, outbox_published`); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		sql         string
		args        []any
		wantIndexes []string
	}{
		{"claim", claimSQL, []any{1000},
			[]string{"outbox_events_pending_idx", "outbox_events_aggregate_idx"}},
		{"cleanup", deletePublishedSQL, []any{(720 * 3600.0), 1000},
			[]string{"outbox_published_published_at_idx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw []byte
			if err := b.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+tt.sql, tt.args...).Scan(&raw); err != nil {
				t.Fatalf("explain: %v", err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal(raw, &plans); err != nil {
				t.Fatalf("parse plan: %v\n%s", err, raw)
			}
			indexes, seqScans := plans[0].Plan.walk()
			for _, want := range tt.wantIndexes {
				if !slices.Contains(indexes, want) {
					t.Errorf("plan uses indexes %v, want %s among them\n%s", indexes, want, raw)
				}
			}
			for _, table := range []string{"outbox_events", "outbox_published"} {
				if slices.Contains(seqScans, table) {
					t.Errorf("plan scans %s sequentially, want index access only\n%s", table, raw)
				}
			}
		})
	}
}

// planNode is the part of EXPLAIN's JSON output these tests read.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

// walk returns the indexes the plan reads and the relations it scans sequentially.
func (n planNode) walk() (indexes, seqScans []string) {
	if n.IndexName != "" {
		indexes = append(indexes, n.IndexName)
	}
	if n.NodeType == "Seq Scan" {
		seqScans = append(seqScans, n.Relation)
	}
	for _, child := range n.Plans {
		i, s := child.walk()
		indexes, seqScans = append(indexes, i...), append(seqScans, s...)
	}
	return indexes, seqScans
}
