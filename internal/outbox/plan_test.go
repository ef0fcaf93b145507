package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// The relay polls and the cleaner deletes on a table that holds 30 days of published
// rows. These tests grow the table to 50,000 published rows around a small backlog and
// check, with EXPLAIN, that both statements reach their rows through the partial
// indexes built for them (migrations/payments) instead of scanning the table: that is
// what keeps polling cheap however large the table gets.
func TestClaimAndCleanupPlansUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, status, created_at, published_at)
		SELECT gen_random_uuid(), 'TestEvent', 'agg-' || i, '{}', 'published', at, at
		FROM generate_series(1, 50000) AS i,
		     -- Steady state: published over the last 29 days, and the few rows that
		     -- crossed the 30-day horizon since the cleaner's last pass.
		     LATERAL (SELECT CASE WHEN i <= 50 THEN now() - interval '31 days'
		                          ELSE now() - make_interval(mins => i % (29 * 24 * 60)) END AS at) t`); err != nil {
		t.Fatalf("grow the table: %v", err)
	}
	for i := range 20 {
		b.insert(t, newMessage(t, fmt.Sprintf("pending-%d", i), 0))
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE outbox_events`); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		sql         string
		args        []any
		wantIndexes []string
	}{
		{"claim", claimSQL, []any{uuid.New(), 30.0, 1000},
			[]string{"outbox_events_pending_idx", "outbox_events_aggregate_idx"}},
		{"cleanup", deletePublishedSQL, []any{(720 * 3600.0), 1000},
			[]string{"outbox_events_published_at_idx"}},
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
			if slices.Contains(seqScans, "outbox_events") {
				t.Errorf("plan scans outbox_events sequentially, want index access only\n%s", raw)
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
