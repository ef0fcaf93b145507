package outbox

import "time"

// ClaimSQL and MarkClaimedSQL are the relay's claim and mark (store.go), MarkPublishedSQL
// the mark by event id that the CDC relay uses, and
// BatchBeginSQL the BEGIN of its batch's transaction, exported for
// cmd/bench's SQL ladder, which runs them without Kafka to price each guarantee in the
// database alone (docs/bench.md). The relay itself never reads these names.
const (
	ClaimSQL         = claimSQL
	MarkClaimedSQL   = markClaimedSQL
	MarkPublishedSQL = markPublishedSQL
)

// BatchBeginSQL is the BEGIN of a batch's transaction with lease as its lease.
func BatchBeginSQL(lease time.Duration) string { return batchBeginSQL(lease) }
