package harness

import (
	"path/filepath"
	"testing"
)

// Checking someone else's service must leave the mentor's checkout unmodified: its
// reports go under .stack/, which git ignores, and only our own runs write reports/.
func TestReportDirOfSomeoneElsesServiceIsNotTracked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"our service", Options{Root: root}, filepath.Join(root, "reports")},
		{"a running target", Options{Root: root, Target: &Target{}}, filepath.Join(root, ".stack", "chaos-reports")},
		{"a student's commands", Options{Root: root, Commands: &ServiceCommands{}}, filepath.Join(root, ".stack", "chaos-reports")},
		{"explicit", Options{Root: root, Target: &Target{}, ReportDir: "/elsewhere"}, "/elsewhere"},
	}
	for _, tt := range tests {
		if got := tt.opts.WithDefaults().ReportDir; got != tt.want {
			t.Errorf("%s: ReportDir = %q, want %q", tt.name, got, tt.want)
		}
	}
}
