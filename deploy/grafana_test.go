package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// The Grafana of the compose stack: provisioning files under grafana/, mounted read-only.
// Grafana is not run here; these tests check what would otherwise show up only as an
// empty dashboard or "No data" in a browser.

var (
	grafanaDatasourcesPath = filepath.Join("grafana", "datasources", "prometheus.yml")
	grafanaProvidersPath   = filepath.Join("grafana", "dashboards", "dashboards.yml")
	grafanaDashboardPath   = filepath.Join("grafana", "dashboards", "outbox.json")
)

type grafanaDatasource struct {
	Name string `yaml:"name"`
	UID  string `yaml:"uid"`
	Type string `yaml:"type"`
	URL  string `yaml:"url"`
}

func readGrafanaDatasource(t *testing.T) grafanaDatasource {
	t.Helper()
	data, err := os.ReadFile(grafanaDatasourcesPath)
	if err != nil {
		t.Fatalf("read Grafana data sources: %v", err)
	}
	var file struct {
		Datasources []grafanaDatasource `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("parse %s: %v", grafanaDatasourcesPath, err)
	}
	if len(file.Datasources) != 1 {
		t.Fatalf("%s has %d data sources, want 1", grafanaDatasourcesPath, len(file.Datasources))
	}
	return file.Datasources[0]
}

type grafanaRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaDashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID         int        `json:"id"`
		Type       string     `json:"type"`
		Title      string     `json:"title"`
		Datasource grafanaRef `json:"datasource"`
		Targets    []struct {
			RefID      string     `json:"refId"`
			Expr       string     `json:"expr"`
			Datasource grafanaRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

// hostPath maps a path inside a service's container to the host file that a bind mount
// puts there, or "" if no bind mount covers it.
func hostPath(s types.ServiceConfig, containerPath string) string {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if containerPath == v.Target {
			return v.Source
		}
		if rel, ok := strings.CutPrefix(containerPath, v.Target+"/"); ok {
			return filepath.Join(v.Source, filepath.FromSlash(rel))
		}
	}
	return ""
}

// exportedSeries reports whether a series name in PromQL belongs to a registered metric:
// its own name, or a histogram's _bucket, _sum or _count series. outbox_pending_count is
// a gauge whose name ends in _count, hence the exact name first.
func exportedSeries(exported map[string]bool, series string) bool {
	if exported[series] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && exported[base] {
			return true
		}
	}
	return false
}

// TestGrafanaDashboard: the dashboard is valid JSON, small, queries the provisioned data
// source, and every metric it plots is one the code registers.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(grafanaDashboardPath)
	if err != nil {
		t.Fatalf("read dashboard: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	var d grafanaDashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not a dashboard: %v", grafanaDashboardPath, err)
	}
	if dec.More() {
		t.Fatalf("%s has data after the dashboard object", grafanaDashboardPath)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid = %q, title = %q; both are needed for a stable URL", d.UID, d.Title)
	}
	// A dashboard a student reads at a glance: a handful of panels, not a wall.
	if n := len(d.Panels); n == 0 || n > 8 {
		t.Fatalf("dashboard has %d panels, want 1 to 8", n)
	}

	ds := readGrafanaDatasource(t)
	exported := exportedMetrics(t)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" {
			t.Errorf("%s has no title", name)
		}
		if ids[p.ID] {
			t.Errorf("%s: duplicate panel id", name)
		}
		ids[p.ID] = true
		if p.Datasource.UID != ds.UID || p.Datasource.Type != ds.Type {
			t.Errorf("%s uses data source %+v, want the provisioned {Type:%s UID:%s}", name, p.Datasource, ds.Type, ds.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", name)
		}
		for _, q := range p.Targets {
			if q.Datasource.UID != "" && q.Datasource.UID != ds.UID {
				t.Errorf("%s query %s uses data source uid %q, want %q", name, q.RefID, q.Datasource.UID, ds.UID)
			}
			used := metricName.FindAllString(q.Expr, -1)
			if len(used) == 0 {
				t.Errorf("%s query %s uses no outbox_ or antifraud_ metric: %q", name, q.RefID, q.Expr)
			}
			for _, m := range used {
				if !exportedSeries(exported, m) {
					t.Errorf("%s query %s uses %s, which no package under internal/ registers", name, q.RefID, m)
				}
			}
		}
	}
}

// TestGrafanaProvisioning: the files Grafana is told to read are the ones mounted into
// its container, and its data source is the prometheus service.
func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	grafana := service(t, p, "grafana")

	for _, v := range grafana.Volumes {
		if v.Type == types.VolumeTypeBind && !v.ReadOnly {
			t.Errorf("grafana mounts %s read-write, want :ro", v.Source)
		}
	}
	for dir, want := range map[string]string{
		"/etc/grafana/provisioning/datasources": grafanaDatasourcesPath,
		"/etc/grafana/provisioning/dashboards":  grafanaProvidersPath,
	} {
		src := hostPath(grafana, dir)
		abs, _ := filepath.Abs(filepath.Dir(want))
		if src != abs {
			t.Errorf("grafana: %s comes from %q, want %s", dir, src, abs)
		}
	}

	// The dashboard provider reads a directory of the container that holds outbox.json.
	data, err := os.ReadFile(grafanaProvidersPath)
	if err != nil {
		t.Fatalf("read dashboard providers: %v", err)
	}
	var providers struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(data, &providers); err != nil {
		t.Fatalf("parse %s: %v", grafanaProvidersPath, err)
	}
	if len(providers.Providers) != 1 || providers.Providers[0].Type != "file" {
		t.Fatalf("%s: want one provider of type file, got %+v", grafanaProvidersPath, providers.Providers)
	}
	dir := hostPath(grafana, providers.Providers[0].Options.Path)
	if _, err := os.Stat(filepath.Join(dir, filepath.Base(grafanaDashboardPath))); dir == "" || err != nil {
		t.Errorf("dashboard provider path %q does not hold outbox.json in the container (host %q, %v)",
			providers.Providers[0].Options.Path, dir, err)
	}
	home := env(t, grafana, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
	if src := hostPath(grafana, home); src == "" {
		t.Errorf("home dashboard %s is not mounted into grafana", home)
	} else if _, err := os.Stat(src); err != nil {
		t.Errorf("home dashboard %s: %v", home, err)
	}

	for name, want := range map[string]string{
		"GF_AUTH_ANONYMOUS_ENABLED":  "true",
		"GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
	} {
		if got := env(t, grafana, name); got != want {
			t.Errorf("grafana %s = %q, want %q", name, got, want)
		}
	}
	published := false
	for _, pc := range grafana.Ports {
		if pc.Published == "3000" {
			published = true
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("grafana publishes 3000 on %q, want 127.0.0.1 only", pc.HostIP)
			}
		}
	}
	if !published {
		t.Error("grafana does not publish host port 3000")
	}

	// The data source is the prometheus service, on the port it listens on.
	ds := readGrafanaDatasource(t)
	if ds.Type != "prometheus" {
		t.Errorf("data source type = %q, want prometheus", ds.Type)
	}
	u, err := url.Parse(ds.URL)
	if err != nil {
		t.Fatalf("data source url %q: %v", ds.URL, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("data source url %q has no host:port: %v", ds.URL, err)
	}
	prom := service(t, p, host)
	listens := false
	for _, pc := range prom.Ports {
		listens = listens || fmt.Sprint(pc.Target) == port
	}
	if host != "prometheus" || !listens {
		t.Errorf("data source url %q: want the prometheus service on its container port", ds.URL)
	}
}
