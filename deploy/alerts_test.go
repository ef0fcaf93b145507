package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The rules' behaviour is tested by promtool (prometheus/alerts_test.yml). These tests
// check what promtool cannot: that every alert leads somewhere a human can act on, and
// that it watches a metric the code really exports.

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatalf("read alerts.yml: %v", err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("parse alerts.yml: %v", err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return rules
}

// githubAnchor is the fragment GitHub gives a Markdown heading: lower case, spaces to
// dashes, other punctuation dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAlertsHaveRunbookEntries(t *testing.T) {
	t.Parallel()
	runbook, err := os.ReadFile(filepath.Join("..", "docs", "runbook.md"))
	if err != nil {
		t.Fatalf("read runbook: %v", err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[githubAnchor(m[1])] = true
	}

	for _, r := range readAlertRules(t) {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert", r.Expr)
			continue
		}
		for _, key := range []string{"summary", "description"} {
			if r.Annotations[key] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, key)
			}
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s severity = %q, want warning or critical", r.Alert, s)
		}
		url := r.Annotations["runbook_url"]
		page, anchor, ok := strings.Cut(url, "#")
		if !ok || !strings.HasSuffix(page, "/docs/runbook.md") {
			t.Errorf("alert %s runbook_url = %q, want .../docs/runbook.md#<anchor>", r.Alert, url)
			continue
		}
		if anchor != strings.ToLower(r.Alert) {
			t.Errorf("alert %s links to #%s, want #%s", r.Alert, anchor, strings.ToLower(r.Alert))
		}
		if !anchors[anchor] {
			t.Errorf("alert %s links to #%s, which is not a heading of docs/runbook.md", r.Alert, anchor)
		}
	}
}

// exportedMetrics returns the names of the metrics that the packages under internal/
// register: every Name: "..." of their non-test Go files.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	exported := map[string]bool{}
	name := regexp.MustCompile(`Name:\s*"([a-z_]+)"`)
	err := filepath.WalkDir(filepath.Join("..", "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(data, -1) {
			exported[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan internal/ for metrics: %v", err)
	}
	if len(exported) == 0 {
		t.Fatal("no metric registered under internal/")
	}
	return exported
}

// metricName matches the project's own metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\b((?:outbox|antifraud|postgres)_[a-z_]+)\b`)

// TestAlertsWatchExportedMetrics: an alert on a misspelt or renamed metric never fires.
func TestAlertsWatchExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	for _, r := range readAlertRules(t) {
		used := metricName.FindAllString(r.Expr, -1)
		if len(used) == 0 {
			t.Errorf("alert %s uses no outbox_, antifraud_ or postgres_ metric: %q", r.Alert, r.Expr)
		}
		for _, m := range used {
			if !exported[m] {
				t.Errorf("alert %s uses %s, which no package under internal/ registers", r.Alert, m)
			}
		}
	}
}
