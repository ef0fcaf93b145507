package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayStaysWithinItsJitteredBounds(t *testing.T) {
	t.Parallel()
	base, max := 100*time.Millisecond, 10*time.Second
	tests := []struct {
		n    int
		want time.Duration // the un-jittered delay; Delay returns a value in [want/2, want]
	}{
		{0, 100 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{7, max},  // 12.8 s, capped
		{64, max}, // a shift this large must not overflow
	}
	for _, tt := range tests {
		for range 100 {
			if got := Delay(base, max, tt.n); got < tt.want/2 || got > tt.want {
				t.Fatalf("Delay(%s, %s, %d) = %s, want within [%s, %s]", base, max, tt.n, got, tt.want/2, tt.want)
			}
		}
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	if !Wait(context.Background(), 0) {
		t.Errorf("Wait(live ctx, 0) = false, want true")
	}
	if !Wait(context.Background(), time.Millisecond) {
		t.Errorf("Wait(live ctx, 1ms) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Wait(ctx, time.Hour) {
		t.Errorf("Wait(cancelled ctx, 1h) = true, want false")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Wait(cancelled ctx, 1h) took %s, want an immediate return", took)
	}
}
