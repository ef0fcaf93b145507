package measure

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFlagsDefineAndCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		withBacklog bool
		args        []string
		want        Flags
		wantErr     bool
	}{
		{name: "defaults", withBacklog: true,
			want: Flags{Backlog: 100_000, Reps: 3, LatencyRate: 1000, LatencyDuration: 15 * time.Second, Report: "reports/bench.json"}},
		{name: "set", withBacklog: true, args: []string{"-backlog", "1000", "-reps", "1", "-latency-rate", "100", "-latency-duration", "2s", "-report", "x.json"},
			want: Flags{Backlog: 1000, Reps: 1, LatencyRate: 100, LatencyDuration: 2 * time.Second, Report: "x.json"}},
		{name: "no backlog flag", withBacklog: false,
			want: Flags{Reps: 3, LatencyRate: 1000, LatencyDuration: 15 * time.Second, Report: "reports/bench.json"}},
		{name: "backlog not defined", withBacklog: false, args: []string{"-backlog", "1000"}, wantErr: true},
		{name: "zero backlog", withBacklog: true, args: []string{"-backlog", "0"}, wantErr: true},
		{name: "zero reps", withBacklog: true, args: []string{"-reps", "0"}, wantErr: true},
		{name: "zero rate", withBacklog: false, args: []string{"-latency-rate", "0"}, wantErr: true},
		{name: "short latency", withBacklog: true, args: []string{"-latency-duration", "500ms"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("bench test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var got Flags
			got.Define(fs, tt.withBacklog)
			err := fs.Parse(tt.args)
			if err == nil {
				err = got.Check()
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("%q: error %v, want error: %t", tt.args, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreUnexported(Flags{})); diff != "" {
				t.Errorf("%q (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}
