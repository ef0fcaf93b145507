package verify

// Observed is what the verifier found after the drain. Fill turns it into the report's
// counts; it is kept apart from the reading so that every count can be tested on a
// hand-made Observed, a broken one included.
type Observed struct {
	// Accepted are the payment ids the API answered 201 with during the load (the
	// load generator's, set by the runner): each must be committed.
	Accepted []string
	// Committed holds every row of the payments table by id.
	Committed map[string]PaymentFields
	// Lifecycles holds every payment's state and version; nil when the payments table
	// has no lifecycle columns (Schema.PaymentLifecycle).
	Lifecycles map[string]CommittedLifecycle
	Topic      TopicContents
	// ExpectedPartitions is the partition count the topic must have.
	ExpectedPartitions int
	// Schema says which of the tables docs/contract.md names were found.
	Schema Schema
	// Decisions counts decision rows per payment id; nil without a consumer database
	// or a decisions table.
	Decisions map[string]int
	// DecisionEvents is the event_id of each payment's decision; nil when the
	// decisions table has no event_id column.
	DecisionEvents map[string]string
	DLQ            int
	// ConsumerDuplicates from the consumer's dedup table, -1 if it keeps no count.
	ConsumerDuplicates int
	// ConsumerOrder is, per payment, the sequences of the events the consumer took, in
	// the order it took them; nil when it does not record them (Schema.ConsumerOrder).
	ConsumerOrder map[string][]int
	// ConsumerOwnViolations is the row count of the consumer's order_violations, -1
	// without the table.
	ConsumerOwnViolations int
	// ExpectedTotals are the running totals of the committed payments that have a
	// decision, per user and currency; ConsumerTotals are the consumer's user_totals rows
	// (see totals.go). Both nil when the check is off.
	ExpectedTotals, ConsumerTotals map[UserCurrency]RunningTotal
	Notes                          []string
}
