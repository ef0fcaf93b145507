package testenv

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PlanAccess explains sql with args on pool and returns the indexes its plan reads and
// the relations it scans sequentially, for tests that pin a statement to its index.
func PlanAccess(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) (indexes, seqScans []string, plan []byte) {
	tb.Helper()
	if err := pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		tb.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &plans); err != nil {
		tb.Fatalf("parse plan: %v\n%s", err, plan)
	}
	indexes, seqScans = plans[0].Plan.walk()
	return indexes, seqScans, plan
}

// planNode is the part of EXPLAIN's JSON output PlanAccess reads.
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
