package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// DropSlot never takes the slot from a relay that streams from it; once the relay is
// stopped it drops the slot and its catch-up record, and a relay started later creates
// a new slot and publishes what was committed meanwhile.
func TestDropSlotLeavesASlotInUse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slot := DefaultSlot(b.dbURL)
	r := b.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return r.streaming(), "relay is not streaming" })
	if dropped, err := DropSlot(ctx, b.pool, slot); !errors.Is(err, ErrSlotInUse) || dropped {
		t.Fatalf("DropSlot of a slot in use = %v, %v; want false, ErrSlotInUse", dropped, err)
	}
	r.stop()
	testenv.WaitFor(t, 20*time.Second, func() (bool, string) {
		dropped, err := DropSlot(ctx, b.pool, slot)
		return err == nil && dropped, "slot not dropped once its relay stopped"
	})
	if n := b.count(t, `SELECT count(*) FROM outbox_cdc_slots WHERE slot_name = $1`, slot); n != 0 {
		t.Errorf("%d catch-up records of the dropped slot, want 0: a new slot must catch up again", n)
	}
	b.insert(t, "after-drop", 3)
	b.start(t)
	b.waitPublished(t, 3, 90*time.Second)
}
