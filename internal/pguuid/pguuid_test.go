package pguuid

import (
	"testing"

	"github.com/google/uuid"
)

func TestArraysKeepEveryByteInOrder(t *testing.T) {
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.Nil}
	got := Arrays(ids)
	if len(got) != len(ids) {
		t.Fatalf("Arrays returned %d arrays for %d ids", len(got), len(ids))
	}
	for i, id := range ids {
		if uuid.UUID(got[i]) != id {
			t.Errorf("array %d = %x, want %x", i, got[i], id[:])
		}
	}
}
