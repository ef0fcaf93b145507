package poll

import (
	"context"
	"log/slog"
	"time"
)

// faultHoldEvery is how many acknowledged batches make one held by FaultHoldBeforeMark:
// the tenth, the twentieth, and so on. Holding one in ten, not all of them, keeps the
// relay draining: a held batch loses its rows at the lease and another claim publishes
// them, which is held only if it is a tenth batch in turn.
const faultHoldEvery = 10

// holdBeforeMark applies the FaultHoldBeforeMark fault injection (Config): it keeps
// every faultHoldEvery-th batch that Kafka acknowledged waiting, idle in its
// transaction, for FaultHoldBeforeMark before its mark, or until ctx ends. It does
// nothing when the knob is 0, as it is outside the replica-pause chaos scenario.
func (r *Relay) holdBeforeMark(ctx context.Context, published []claimedEvent) {
	if r.cfg.FaultHoldBeforeMark == 0 || len(published) == 0 {
		return
	}
	if r.acknowledged.Add(1)%faultHoldEvery != 0 {
		return
	}
	r.logger.Warn("fault injection: holding an acknowledged batch before its mark",
		slog.Int("acknowledged", len(published)), slog.Duration("hold", r.cfg.FaultHoldBeforeMark))
	t := time.NewTimer(r.cfg.FaultHoldBeforeMark)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
