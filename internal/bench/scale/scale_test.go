package scale

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"10000,100000, 1000000", []int{10000, 100000, 1000000}, false},
		{"", nil, false}, // an empty list skips that part of the benchmark
		{"1000,", []int{1000}, false},
		{"0", nil, true},
		{"-5", nil, true},
		{"1e6", nil, true},
	}
	for _, tt := range tests {
		got, err := parseSizes(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseSizes(%q) error = %v, want error %t", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseSizes(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// Each cleanup repetition removes one day of history, so there must be a day left for
// every repetition.
func TestScaleFlagsNeedADayPerCleanupRepetition(t *testing.T) {
	t.Parallel()
	if _, err := parseScaleFlags([]string{"-reps", "8", "-history-days", "8"}, io.Discard); err == nil {
		t.Error("8 repetitions over 8 days accepted, want an error")
	}
	if _, err := parseScaleFlags([]string{"-reps", "3", "-history-days", "8"}, io.Discard); err != nil {
		t.Errorf("3 repetitions over 8 days: %v", err)
	}
}

// -relays poll leaves the CDC relay's drains out; the default measures both.
func TestScaleFlagsChooseTheRelaysToDrain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		wantCDC bool
		wantErr bool
	}{
		{nil, true, false},
		{[]string{"-relays", "poll,cdc"}, true, false},
		{[]string{"-relays", "poll"}, false, false},
		{[]string{"-relays", "cdc"}, false, true},
	}
	for _, tt := range tests {
		c, err := parseScaleFlags(tt.args, io.Discard)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseScaleFlags(%q) error = %v, want error %t", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && c.withCDC != tt.wantCDC {
			t.Errorf("parseScaleFlags(%q): withCDC = %t, want %t", tt.args, c.withCDC, tt.wantCDC)
		}
	}
}
