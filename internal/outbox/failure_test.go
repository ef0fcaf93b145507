package outbox

import (
	"context"
	"testing"
	"time"
)

func TestBackoffStaysWithinItsJitteredBounds(t *testing.T) {
	t.Parallel()
	base, max := 100*time.Millisecond, 10*time.Second
	tests := []struct {
		n    int
		want time.Duration // the un-jittered delay; backoff returns a value in [want/2, want]
	}{
		{0, 100 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{7, max},  // 12.8 s, capped
		{64, max}, // a shift this large must not overflow
	}
	for _, tt := range tests {
		for range 100 {
			if got := backoff(base, max, tt.n); got < tt.want/2 || got > tt.want {
				t.Fatalf("backoff(%s, %s, %d) = %s, want within [%s, %s]", base, max, tt.n, got, tt.want/2, tt.want)
			}
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	if !sleep(context.Background(), 0) {
		t.Errorf("sleep(live ctx, 0) = false, want true")
	}
	if !sleep(context.Background(), time.Millisecond) {
		t.Errorf("sleep(live ctx, 1ms) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if sleep(ctx, time.Hour) {
		t.Errorf("sleep(cancelled ctx, 1h) = true, want false")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("sleep(cancelled ctx, 1h) took %s, want an immediate return", took)
	}
}
