package pgprimary

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestWatcherCountsChangesOfServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		servers []string
		want    float64
	}{
		{name: "first connection", servers: []string{"10.0.0.1:5432"}, want: 0},
		{name: "same server again", servers: []string{"10.0.0.1:5432", "10.0.0.1:5432"}, want: 0},
		{name: "failover", servers: []string{"10.0.0.1:5432", "10.0.0.2:5432", "10.0.0.2:5432"}, want: 1},
		{name: "failover and back", servers: []string{"10.0.0.1:5432", "10.0.0.2:5432", "10.0.0.1:5432"}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := NewWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.servers {
				w.saw(s)
			}
			if got := testutil.ToFloat64(w.changes); got != tt.want {
				t.Errorf("postgres_primary_changes_total after %v = %v, want %v", tt.servers, got, tt.want)
			}
		})
	}
}
