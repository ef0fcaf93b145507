package cdc

import "context"

// refreshSlotStats sets outbox_cdc_wal_retained_bytes: the WAL the slot holds back. The
// relay's monitor (delivery.PendingMonitor, the polling relay's too) runs it after it
// refreshes the pending count and the oldest pending age, which read the table as in
// polling mode: the relay marks rows published, so the table still says what is
// pending.
func (r *Relay) refreshSlotStats(ctx context.Context) error {
	retained, err := r.store.walRetained(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.metrics.walRetained.Set(float64(retained))
	return nil
}
