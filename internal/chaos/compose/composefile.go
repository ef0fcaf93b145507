package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// The compose services the harness works with, by the names the file gives them.
const (
	// composeAPI is the API the load is sent to; its relay is the one faulted.
	composeAPI = "api"
	// composeConsumer is the consumer whose database the verifier reads.
	composeConsumer = "consumer"
	// composeToxiproxy is the Toxiproxy server the faults are made with.
	composeToxiproxy = "toxiproxy"
)

// Load reads the compose file at path as docker compose does: checked against the
// compose specification, ${VAR:-default} interpolated from environ, paths resolved
// against the file's directory, and only the services a plain `up` starts (no profile).
func Load(ctx context.Context, path string, environ []string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithEnv(environ))
	if err != nil {
		return nil, fmt.Errorf("compose options for %s: %w", path, err)
	}
	p, err := cli.ProjectFromOptions(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return p, nil
}

// composeToxiproxyConfig is what the toxiproxy service starts with: its API's port
// (-port) and the proxies of its -config file (mounted from the host), by the port each
// listens on.
type composeToxiproxyConfig struct {
	APIPort string
	Proxies map[string]string
}

// readComposeToxiproxy reads the toxiproxy service's command and configuration file.
func readComposeToxiproxy(p *types.Project) (composeToxiproxyConfig, error) {
	s, err := p.GetService(composeToxiproxy)
	if err != nil {
		return composeToxiproxyConfig{}, err
	}
	flags := map[string]string{}
	args := []string(s.Command)
	for i := 0; i < len(args); i++ {
		name, value, ok := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !ok && i+1 < len(args) {
			i++
			value = args[i]
		}
		flags[name] = value
	}
	cfg := composeToxiproxyConfig{APIPort: flags["port"], Proxies: map[string]string{}}
	if cfg.APIPort == "" {
		return cfg, fmt.Errorf("service %s: no -port in its command %q: the harness needs the API's port", composeToxiproxy, args)
	}
	source := ""
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == flags["config"] {
			source = v.Source
		}
	}
	if source == "" {
		return cfg, fmt.Errorf("service %s: no -config file mounted from the host (command %q): the harness needs its proxies", composeToxiproxy, args)
	}
	data, err := os.ReadFile(source)
	if err != nil {
		return cfg, fmt.Errorf("read the Toxiproxy configuration: %w", err)
	}
	var proxies []struct{ Name, Listen string }
	if err := json.Unmarshal(data, &proxies); err != nil {
		return cfg, fmt.Errorf("parse %s: %w", source, err)
	}
	for _, px := range proxies {
		_, port, err := net.SplitHostPort(px.Listen)
		if err != nil {
			return cfg, fmt.Errorf("%s: proxy %s listens on %q: %w", source, px.Name, px.Listen, err)
		}
		cfg.Proxies[port] = px.Name
	}
	return cfg, nil
}

// composeTarget is the compose stack's API, databases, topic and brokers as the harness
// reaches them from the host, read from the variables the file gives the api and the
// consumer (docs/contract.md names them) through view. It also checks what the
// black-box mode relies on: the Toxiproxy API where the harness drives it, and the api's
// relay seeded through the proxy the faults break.
func composeTarget(p *types.Project, view View, toxiproxyAPI string) (target *harness.Target, consumerURL string, err error) {
	read := func(service, variable string) (string, error) {
		s, err := p.GetService(service)
		if err != nil {
			return "", err
		}
		raw := s.Environment[variable]
		if raw == nil || *raw == "" {
			return "", fmt.Errorf("the compose file gives service %s no %s (docs/contract.md)", service, variable)
		}
		v, err := view.Value(p, service, *raw)
		if err != nil {
			return "", fmt.Errorf("service %s, %s=%s: %w", service, variable, *raw, err)
		}
		return v, nil
	}
	values := map[string]string{}
	for _, sv := range [][2]string{
		{composeAPI, "HTTP_ADDR"}, {composeAPI, "DATABASE_URL"}, {composeAPI, "KAFKA_TOPIC"},
		{composeConsumer, "HTTP_ADDR"}, {composeConsumer, "DATABASE_URL"}, {composeConsumer, "KAFKA_BROKERS"},
	} {
		if values[sv[0]+" "+sv[1]], err = read(sv[0], sv[1]); err != nil {
			return nil, "", err
		}
	}
	if err := checkComposeFaults(p, view, toxiproxyAPI); err != nil {
		return nil, "", err
	}
	return &harness.Target{
		APIURL:     "http://" + values[composeAPI+" HTTP_ADDR"],
		PaymentsDB: values[composeAPI+" DATABASE_URL"],
		ConsumerDB: values[composeConsumer+" DATABASE_URL"],
		// The consumer's seeds: the DIRECT listener, never the proxy.
		Brokers: strings.Split(values[composeConsumer+" KAFKA_BROKERS"], ","),
		Topic:   values[composeAPI+" KAFKA_TOPIC"],
		Stack:   stack.ComposeKind,
	}, "http://" + values[composeConsumer+" HTTP_ADDR"], nil
}

// checkComposeFaults checks that the faults the harness makes reach the compose
// stack's relay: it drives Toxiproxy at toxiproxyAPI and breaks the proxy
// devstack.RelayProxy, so the toxiproxy service's API must be there and every seed
// broker of the api must be that proxy.
func checkComposeFaults(p *types.Project, view View, toxiproxyAPI string) error {
	tp, err := readComposeToxiproxy(p)
	if err != nil {
		return err
	}
	apiAddr, err := view.Addr(composeToxiproxy, tp.APIPort)
	if err != nil {
		return fmt.Errorf("the Toxiproxy API: %w", err)
	}
	if apiAddr != toxiproxyAPI {
		return fmt.Errorf("the Toxiproxy API is at %s on the host, and the harness drives it at %s", apiAddr, toxiproxyAPI)
	}
	api, err := p.GetService(composeAPI)
	if err != nil {
		return err
	}
	seeds := api.Environment["KAFKA_BROKERS"]
	if seeds == nil || !isAddrList(*seeds) {
		return fmt.Errorf("service %s has no KAFKA_BROKERS list of host:port", composeAPI)
	}
	for seed := range strings.SplitSeq(*seeds, ",") {
		host, port, _ := net.SplitHostPort(seed)
		if host != composeToxiproxy || tp.Proxies[port] != devstack.RelayProxy {
			return fmt.Errorf("service %s seeds its relay at %s, not at the Toxiproxy proxy %s: the faults would not reach it", composeAPI, seed, devstack.RelayProxy)
		}
	}
	return nil
}
