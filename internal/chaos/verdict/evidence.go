package verdict

// Evidence is what the harness saw for itself of what the faults did: from the topic
// (followed live by a TopicWatch on the DIRECT listener), from its own clients and from
// PostgreSQL, never from the service's metrics. The validity rows read it, so a service
// cannot make a run invalid by hiding its failures, nor valid by reporting some, and a
// correct service is valid whatever timeouts its Kafka client keeps.
type Evidence struct {
	// EventsSeen counts the distinct event ids the watch saw.
	EventsSeen int `json:"events_seen"`
	// InjectedCopies counts the copies of real records that the harness published
	// itself, for the consumer's dedup to absorb.
	InjectedCopies int `json:"injected_copies"`
	// ServiceCopies counts the other records beyond the first of an event id: the
	// service's own duplicates, e.g. a relay publishing again after lost acks. An
	// idempotent producer removes its own, so 0 is no fault of the service.
	ServiceCopies int `json:"service_copies"`
	// LoadStartS and LoadEndS bound the load, in seconds from the run's start.
	LoadStartS float64 `json:"load_start_s"`
	LoadEndS   float64 `json:"load_end_s"`
	// PostgresStartS is PostgreSQL's own pg_postmaster_start_time(), read after the
	// drain, in seconds from the run's start (negative: before the run); nil when it
	// could not be read.
	PostgresStartS *float64 `json:"postgres_start_s,omitempty"`
	// ClientRetries counts the load's retried attempts by what the client saw, e.g.
	// "status 503 with Retry-After" or "transport error".
	ClientRetries map[string]int `json:"client_retries,omitempty"`

	// EventsInFlight counts the payments of which the API committed an event while an
	// earlier event of the same payment was not in the topic yet: the relay then held
	// several events of one payment, the moment its order check is for.
	// EventsInFlightInFaults counts those whose later event was committed while a fault
	// window was open.
	EventsInFlight         int `json:"payments_with_events_in_flight"`
	EventsInFlightInFaults int `json:"payments_with_events_in_flight_during_faults"`

	// The timings the validity rows of the scenarios read, kept out of the JSON.
	// AcceptedS: payment id -> when the API answered 201; FirstSeenS: payment id ->
	// when its first event first reached the topic; TransitionSeenS: payment id ->
	// sequence -> when that transition first reached the topic, whatever its event id;
	// Partition: payment id -> the partition its events reached.
	AcceptedS       map[string]float64         `json:"-"`
	FirstSeenS      map[string]float64         `json:"-"`
	TransitionSeenS map[string]map[int]float64 `json:"-"`
	Partition       map[string]int32           `json:"-"`
	// Attempts are the load's POST /payments attempts (load.Result.Attempts), in
	// seconds from the run's start, kept out of the JSON too.
	Attempts []Attempt `json:"-"`
}

// An Attempt is one POST /payments of the load: when it was sent and answered, and
// why it got no 201 (empty for a 201).
type Attempt struct {
	SentS, AnsweredS float64
	Refused          string
}

// A TableSample is the outbox table as PostgreSQL's statistics saw it at one moment.
type TableSample struct {
	AtS       float64 `json:"at_s"`
	Phase     string  `json:"phase"`
	DeadTuple int64   `json:"n_dead_tup"`
	LiveTuple int64   `json:"n_live_tup"`
	// TotalBytes is pg_total_relation_size: heap, indexes and TOAST.
	TotalBytes int64 `json:"total_bytes"`
	// PendingScanBuffers is how many buffers the first page of pending rows costs to
	// find, by the pending index in seq order as the relay's claim looks (EXPLAIN
	// ANALYZE of the harness's own query, not the relay's): the index entries of rows
	// that left 'pending' during the hold cannot be removed, nor marked dead, while the
	// snapshot might still see them, and every look steps over them; -1 if unread.
	PendingScanBuffers int64 `json:"pending_scan_buffers"`
}

// PhaseFigures is the relay's work in one phase, by the payments accepted in it.
type PhaseFigures struct {
	Phase     string  `json:"phase"`
	StartS    float64 `json:"start_s"`
	EndS      float64 `json:"end_s"`
	Accepted  int     `json:"accepted"`
	Published int     `json:"published"`
	// IncomingPerS is the 201s per second, ThroughputPerS the events reaching the
	// topic per second, in the phase's span.
	IncomingPerS   float64 `json:"incoming_per_s"`
	ThroughputPerS float64 `json:"throughput_per_s"`
	// LatencyP50MS and LatencyP99MS are from a payment's 201 to its event's first
	// record in the topic.
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
}

// LongTransactionFigures is what the long-transaction scenario measured, kept in its
// report.
type LongTransactionFigures struct {
	HoldSeconds float64 `json:"hold_seconds"`
	// DeadTuplesKept is n_dead_tup right after a VACUUM at the end of the hold, and
	// PublishedInHold the outbox rows published during it (-1 and 0 when unmeasured).
	DeadTuplesKept  int64          `json:"dead_tuples_kept_by_snapshot"`
	PublishedInHold int64          `json:"published_in_hold"`
	Phases          []PhaseFigures `json:"phases"`
	OutboxTable     []TableSample  `json:"outbox_table"`
}
