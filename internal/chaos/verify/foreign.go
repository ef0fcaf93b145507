package verify

import (
	"fmt"
	"maps"
	"sync"
)

// A RecordPosition is where one record is in a topic.
type RecordPosition struct {
	Partition int32
	Offset    int64
}

// String gives the position as the verdict's notes give it.
func (p RecordPosition) String() string {
	return fmt.Sprintf("partition %d offset %d", p.Partition, p.Offset)
}

// ForeignRecords are the records the harness wrote to a run's topic itself, as another
// producer would, by position and kind. The verifier leaves them out: they are not the
// service's records, and the scenario's own rows judge what the consumer made of them.
// Safe for concurrent use; a nil *ForeignRecords is empty.
type ForeignRecords struct {
	mu sync.Mutex
	at map[RecordPosition]string
}

// CopyKind is the kind of a foreign record that copies a real event under its own
// event id: a valid record, which the consumer must count as a duplicate and never
// dead-letter.
const CopyKind = "duplicate_event_id"

// Add records the foreign record at p and its kind.
func (f *ForeignRecords) Add(p RecordPosition, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[RecordPosition]string{}
	}
	f.at[p] = kind
}

// Reset forgets every record, for another run of the same scenario.
func (f *ForeignRecords) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = nil
}

func (f *ForeignRecords) has(partition int32, offset int64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.at[RecordPosition{partition, offset}]
	return ok
}

// Positions returns a copy of every position and its kind.
func (f *ForeignRecords) Positions() map[RecordPosition]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.at)
}
