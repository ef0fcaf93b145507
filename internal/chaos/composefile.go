package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// ComposeFile is the compose stack's file, relative to the repository root.
const ComposeFile = "deploy/docker-compose.yml"

// The compose services the harness works with, by the names the file gives them.
const (
	// composeAPI is the API the load is sent to; its relay is the one faulted.
	composeAPI = "api"
	// composeConsumer is the consumer whose database the verifier reads.
	composeConsumer = "consumer"
	// composeToxiproxy is the Toxiproxy server the faults are made with.
	composeToxiproxy = "toxiproxy"
)

// LoadCompose reads the compose file at path as docker compose does: checked against the
// compose specification, ${VAR:-default} interpolated from environ, paths resolved
// against the file's directory, and only the services a plain `up` starts (no profile).
func LoadCompose(ctx context.Context, path string, environ []string) (*types.Project, error) {
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

// A ComposeView maps what the compose file gives its services, addresses inside the
// compose network and names of databases, topics and groups, to the same things seen
// from the host: where the harness reaches them in compose mode (PublishedAddrs), or
// where processes started outside Docker from the file's environment find them.
type ComposeView struct {
	// Addr returns the host's address of a service's container port.
	Addr func(service, port string) (string, error)
	// Databases renames the database of a PostgreSQL URL, Names a whole value (a topic,
	// a consumer group). Nil: the file's names.
	Databases, Names map[string]string
}

// Env returns a service's whole environment as the host sees it (Value of each).
func (v ComposeView) Env(p *types.Project, service string) (map[string]string, error) {
	s, err := p.GetService(service)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for name, value := range s.Environment {
		if value == nil {
			continue // a bare NAME with nothing in the environment to take: unset
		}
		if env[name], err = v.Value(p, service, *value); err != nil {
			return nil, fmt.Errorf("service %s, %s=%s: %w", service, name, *value, err)
		}
	}
	return env, nil
}

// Value returns one value of service's environment as the host sees it:
//   - a URL whose host is a service's host:port gets the host's address for it, and in a
//     PostgreSQL URL, the database is renamed if Databases says so;
//   - a comma-separated list of host:port (seed brokers, a listen address) gets each
//     address of a service replaced; an address on every interface (0.0.0.0:port or
//     :port) is service's own port;
//   - any other value is a name, renamed if Names says so.
//
// Addresses of anything but the project's services are left as they are.
func (v ComposeView) Value(p *types.Project, service, value string) (string, error) {
	if strings.Contains(value, "://") {
		u, err := url.Parse(value)
		if err != nil {
			return "", err
		}
		if u.Host, err = v.addr(p, service, u.Host); err != nil {
			return "", err
		}
		if (u.Scheme == "postgres" || u.Scheme == "postgresql") && v.Databases[strings.TrimPrefix(u.Path, "/")] != "" {
			u.Path = "/" + v.Databases[strings.TrimPrefix(u.Path, "/")]
		}
		return u.String(), nil
	}
	if isAddrList(value) {
		addrs := strings.Split(value, ",")
		for i, a := range addrs {
			var err error
			if addrs[i], err = v.addr(p, service, a); err != nil {
				return "", err
			}
		}
		return strings.Join(addrs, ","), nil
	}
	if renamed, ok := v.Names[value]; ok {
		return renamed, nil
	}
	return value, nil
}

// addr maps one host:port of service's environment.
func (v ComposeView) addr(p *types.Project, service, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, nil // a URL without a port: not an address of the project
	}
	switch {
	case host == "" || host == "0.0.0.0":
		return v.Addr(service, port) // where the service listens
	case p.Services[host].Name != "":
		return v.Addr(host, port)
	}
	return hostport, nil
}

// isAddrList reports whether value is one or more comma-separated host:port.
func isAddrList(value string) bool {
	if value == "" {
		return false
	}
	for a := range strings.SplitSeq(value, ",") {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return false
		}
		if _, err := strconv.Atoi(port); err != nil {
			return false
		}
	}
	return true
}

// PublishedAddrs is the Addr of compose mode: a service's port is where the file
// publishes it on the host. A Kafka broker's DIRECT listener (its inter-broker one) is
// not published: the host reaches the same broker through the listener it advertises on
// the host's loopback (the file's HOST listener), which must be published at that
// address, or clients would be told to reconnect where nothing listens.
func PublishedAddrs(p *types.Project) func(service, port string) (string, error) {
	return func(service, port string) (string, error) {
		s, err := p.GetService(service)
		if err != nil {
			return "", err
		}
		if addr, ok := published(s, port); ok {
			return addr, nil
		}
		if l, err := parseKafkaListeners(s); err == nil && l.direct.port == port && l.host.port != "" {
			want := net.JoinHostPort(l.host.host, l.host.port)
			if addr, ok := published(s, l.hostContainerPort); ok && addr == want {
				return addr, nil
			}
			return "", fmt.Errorf("service %s advertises its listener for the host as %s but does not publish it there", service, want)
		}
		return "", fmt.Errorf("service %s does not publish port %s on the host", service, port)
	}
}

// published returns the host address of a service's container port, if it has one.
func published(s types.ServiceConfig, port string) (string, bool) {
	for _, pc := range s.Ports {
		if strconv.FormatUint(uint64(pc.Target), 10) != port || pc.Published == "" {
			continue
		}
		host := pc.HostIP
		if host == "" || host == "0.0.0.0" {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, pc.Published), true
	}
	return "", false
}

// kafkaListeners are the listeners of a broker service that the harness cares about.
type kafkaListeners struct {
	// direct is the inter-broker listener (DIRECT), as advertised in the network.
	direct hostPort
	// host is the listener advertised on the host's loopback (HOST), and
	// hostContainerPort the port it is bound on in the container.
	host              hostPort
	hostContainerPort string
	// byPort names the listener bound on each container port.
	byPort map[string]string
}

type hostPort struct{ host, port string }

// parseKafkaListeners reads a broker service's KAFKA_LISTENERS,
// KAFKA_ADVERTISED_LISTENERS and KAFKA_INTER_BROKER_LISTENER_NAME (the apache/kafka
// image's names for listeners, advertised.listeners, inter.broker.listener.name).
func parseKafkaListeners(s types.ServiceConfig) (kafkaListeners, error) {
	get := func(name string) string {
		if v := s.Environment[name]; v != nil {
			return *v
		}
		return ""
	}
	bound, err := listenerMap(get("KAFKA_LISTENERS"))
	if err != nil {
		return kafkaListeners{}, err
	}
	advertised, err := listenerMap(get("KAFKA_ADVERTISED_LISTENERS"))
	if err != nil {
		return kafkaListeners{}, err
	}
	l := kafkaListeners{byPort: map[string]string{}}
	for name, hp := range bound {
		l.byPort[hp.port] = name
	}
	inter := get("KAFKA_INTER_BROKER_LISTENER_NAME")
	l.direct = bound[inter]
	for name, hp := range advertised {
		if hp.host == "127.0.0.1" || hp.host == "localhost" {
			l.host, l.hostContainerPort = hp, bound[name].port
		}
	}
	if l.direct.port == "" {
		return kafkaListeners{}, fmt.Errorf("service %s: no listener %q in KAFKA_LISTENERS", s.Name, inter)
	}
	return l, nil
}

// listenerMap splits "A://host:port,B://:port" by listener name.
func listenerMap(value string) (map[string]hostPort, error) {
	out := map[string]hostPort{}
	if value == "" {
		return nil, fmt.Errorf("no listeners")
	}
	for entry := range strings.SplitSeq(value, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(entry), "://")
		if !ok {
			return nil, fmt.Errorf("listener %q has no NAME://", entry)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("listener %q: %w", entry, err)
		}
		out[name] = hostPort{host, port}
	}
	return out, nil
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
func composeTarget(p *types.Project, view ComposeView) (target *Target, consumerURL string, err error) {
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
	if err := checkComposeFaults(p, view); err != nil {
		return nil, "", err
	}
	return &Target{
		APIURL:     "http://" + values[composeAPI+" HTTP_ADDR"],
		PaymentsDB: values[composeAPI+" DATABASE_URL"],
		ConsumerDB: values[composeConsumer+" DATABASE_URL"],
		// The consumer's seeds: the DIRECT listener, never the proxy.
		Brokers: strings.Split(values[composeConsumer+" KAFKA_BROKERS"], ","),
		Topic:   values[composeAPI+" KAFKA_TOPIC"],
		Stack:   Compose,
	}, "http://" + values[composeConsumer+" HTTP_ADDR"], nil
}

// checkComposeFaults checks that the faults the harness makes reach the compose
// stack's relay: it drives Toxiproxy at devstack.ToxiproxyAPI and breaks the proxy
// devstack.RelayProxy, so the toxiproxy service's API must be there and every seed
// broker of the api must be that proxy.
func checkComposeFaults(p *types.Project, view ComposeView) error {
	tp, err := readComposeToxiproxy(p)
	if err != nil {
		return err
	}
	apiAddr, err := view.Addr(composeToxiproxy, tp.APIPort)
	if err != nil {
		return fmt.Errorf("the Toxiproxy API: %w", err)
	}
	if apiAddr != devstack.ToxiproxyAPI {
		return fmt.Errorf("the Toxiproxy API is at %s on the host, and the harness drives it at %s", apiAddr, devstack.ToxiproxyAPI)
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
