package poll

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The mark finds the batch's rows by the ctids of its claim. If one were not where the
// claim found it, the mark must fail, so that the batch rolls back and its events are
// published again, rather than move some other row or report a mark it did not make.
func TestMarkFailsUnlessEveryClaimedRowMoves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t)
	ctx := context.Background()
	b.insert(t, newMessage(t, "agg", 0), newMessage(t, "agg", 1))

	tx, claimed, err := r.store.claim(ctx, r.cfg.Lease, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d events, %v; want 1 (the second waits for the first)", len(claimed), err)
	}
	defer rollback(tx)
	wrong := claimed[0]
	wrong.TID = pgtype.TID{BlockNumber: wrong.TID.BlockNumber + 1000, OffsetNumber: 1, Valid: true} // no row there
	moved, err := r.store.markPublished(ctx, tx, []claimedEvent{wrong})
	if err == nil || !strings.Contains(err.Error(), "moved 0 of the 1 claimed rows") {
		t.Fatalf("mark of a row that is not where its claim found it: moved %d, err %v; want an error naming the shortfall", moved, err)
	}
}
