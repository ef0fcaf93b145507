package api

import (
	"context"
	"testing"
	"time"
)

// TestLoadThatEndedEarlyIsAnError: a pgbench that could not run (here, no server at
// its address) ends by itself, and a measurement taken beside it was not taken beside
// a load, so Stop must say so rather than report a rate.
func TestLoadThatEndedEarlyIsAnError(t *testing.T) {
	t.Parallel()
	load, err := StartLoad(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", 1)
	if err != nil {
		t.Fatalf("StartLoad: %v", err)
	}
	select {
	case <-load.done:
	case <-time.After(10 * time.Second):
		t.Fatal("pgbench with no server did not end within 10 s")
	}
	if got, err := load.Stop(); err == nil {
		t.Errorf("Stop after pgbench ended by itself: got %+v and no error, want an error", got)
	}
}
