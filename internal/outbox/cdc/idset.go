package cdc

import (
	"sync"

	"github.com/google/uuid"
)

// idSet is a set of event ids that the publisher adds to and the markers take from.
type idSet struct {
	mu  sync.Mutex
	ids map[uuid.UUID]struct{}
}

func (s *idSet) add(ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[uuid.UUID]struct{}{}
	}
	for _, id := range ids {
		s.ids[id] = struct{}{}
	}
}

func (s *idSet) remove(ids []uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.ids, id)
	}
}

// list returns the ids in the set, in no order; nil when it is empty.
func (s *idSet) list() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uuid.UUID
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// clear empties the set: a new session starts with no mark running.
func (s *idSet) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = nil
}
