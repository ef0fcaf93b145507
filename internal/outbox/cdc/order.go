package cdc

// The order the publishers keep between batches in flight. Several batches are
// published at once (pipeline.go), yet an aggregate's events must reach Kafka in stream
// order, and its next event may be sent only once the previous one is acknowledged,
// dead-lettered or parked (publish.go says why). So a batch that holds an event of an
// aggregate with an event in an earlier batch still being published waits for that
// batch before it is published: per aggregate, batches go one at a time, in hand-off
// order, exactly as with one publisher; batches of distinct aggregates (nearly all of
// them: a payment has one event) go side by side.
//
// batchOrder is the stream loop's bookkeeping of it: the loop alone calls it, for each
// event added to the open batch, at each hand-off and for each batch marked, so it needs
// no lock; the publishers only close and wait on the gates it hands them. Its maps
// hold the batches in flight only: a batch is forgotten once it is marked.

// A batchGate is closed once its batch is published: every event acknowledged,
// dead-lettered or parked, and the dead letters written.
type batchGate struct {
	published  chan struct{}
	aggregates []string // the batch's aggregates, each once
}

type batchOrder struct {
	// latest maps each aggregate with an event in a batch not yet marked to the last
	// such batch's gate.
	latest map[string]*batchGate
	// byBatch holds the gates of the batches handed off and not yet marked, by number.
	byBatch map[int]*batchGate
	// The open batch's gate, the gates it waits for (after, each once) and its
	// aggregates (seen).
	open  *batchGate
	after []<-chan struct{}
	waits map[*batchGate]bool
	seen  map[string]bool
}

func newBatchOrder() *batchOrder {
	o := &batchOrder{latest: map[string]*batchGate{}, byBatch: map[int]*batchGate{}}
	o.reset()
	return o
}

func (o *batchOrder) reset() {
	o.open = &batchGate{published: make(chan struct{})}
	o.after, o.waits, o.seen = nil, map[*batchGate]bool{}, map[string]bool{}
}

// add records that e joined the open batch.
func (o *batchOrder) add(e outboxEvent) {
	if o.seen[e.AggregateID] {
		return
	}
	o.seen[e.AggregateID] = true
	o.open.aggregates = append(o.open.aggregates, e.AggregateID)
	if g := o.latest[e.AggregateID]; g != nil && !o.waits[g] {
		o.waits[g] = true
		o.after = append(o.after, g.published)
	}
}

func (o *batchOrder) addAll(events []outboxEvent) {
	for _, e := range events {
		o.add(e)
	}
}

// next is the open batch's gate, which its publisher closes once it is published, and
// the gates it must wait for first.
func (o *batchOrder) next() (gate *batchGate, after []<-chan struct{}) { return o.open, o.after }

// handOff records that the open batch was handed off as batch n: the next batches of
// its aggregates wait for it.
func (o *batchOrder) handOff(n int) {
	for _, agg := range o.open.aggregates {
		o.latest[agg] = o.open
	}
	o.byBatch[n] = o.open
	o.reset()
}

// marked forgets batch n, which is published and marked: nothing waits for it any more.
func (o *batchOrder) marked(n int) {
	gate := o.byBatch[n]
	delete(o.byBatch, n)
	if gate == nil {
		return
	}
	for _, agg := range gate.aggregates {
		if o.latest[agg] == gate {
			delete(o.latest, agg)
		}
	}
}
