package outbox

// ClaimSQL and MarkPublishedSQL are the relay's claim and mark (store.go), exported for
// cmd/bench's SQL ladder, which runs them without Kafka to price each guarantee in the
// database alone (docs/bench.md). The relay itself never reads these names.
const (
	ClaimSQL         = claimSQL
	MarkPublishedSQL = markPublishedSQL
)
