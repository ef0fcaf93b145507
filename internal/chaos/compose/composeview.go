package compose

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// A View maps what the compose file gives its services, addresses inside the
// compose network and names of databases, topics and groups, to the same things seen
// from the host: where the harness reaches them in compose mode (PublishedAddrs), or
// where processes started outside Docker from the file's environment find them.
type View struct {
	// Addr returns the host's address of a service's container port.
	Addr func(service, port string) (string, error)
	// Databases renames the database of a PostgreSQL URL, Names a whole value (a topic,
	// a consumer group). Nil: the file's names.
	Databases, Names map[string]string
}

// Env returns a service's whole environment as the host sees it (Value of each).
func (v View) Env(p *types.Project, service string) (map[string]string, error) {
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
//     PostgreSQL URL, the database is renamed if Databases says so; a multi-host URL
//     (postgres://u@a:5432,b:5432/db) gets each of its hosts mapped, in order;
//   - a comma-separated list of host:port (seed brokers, a listen address) gets each
//     address of a service replaced; an address on every interface (0.0.0.0:port or
//     :port) is service's own port;
//   - any other value is a name, renamed if Names says so.
//
// In a list of addresses, those of a service that no chosen profile starts (the file's
// postgres-standby, unless the project was loaded with its profile) are dropped: see
// hosts. Addresses of anything but the project's services are left as they are.
func (v View) Value(p *types.Project, service, value string) (string, error) {
	if strings.Contains(value, "://") {
		u, err := url.Parse(value)
		if err != nil {
			return "", err
		}
		if u.Host, err = v.hosts(p, service, u.Host); err != nil {
			return "", err
		}
		if (u.Scheme == "postgres" || u.Scheme == "postgresql") && v.Databases[strings.TrimPrefix(u.Path, "/")] != "" {
			u.Path = "/" + v.Databases[strings.TrimPrefix(u.Path, "/")]
		}
		return u.String(), nil
	}
	if isAddrList(value) {
		return v.hosts(p, service, value)
	}
	if renamed, ok := v.Names[value]; ok {
		return renamed, nil
	}
	return value, nil
}

// hosts maps a comma-separated list of addresses of service's environment (a URL's
// hosts, seed brokers), keeping their order: with target_session_attrs=read-write pgx
// tries a URL's hosts in that order and keeps the first that accepts writes.
//
// An address of a service that is in the file but that no chosen profile starts is
// dropped, because that is what it is in a real compose run: the compose network has
// no such name, and a client given the list skips a host whose name does not resolve
// (pgx resolves every host first and connects only to those that resolved). Mapping it
// to an address that refuses would change which error a client reports when every
// other host is down, nothing more; dropping it says plainly that the host is not
// there. A list left with no address is an error: nothing it names would run.
func (v View) hosts(p *types.Project, service, list string) (string, error) {
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		host := a
		if h, _, err := net.SplitHostPort(a); err == nil {
			host = h
		}
		if _, off := p.DisabledServices[host]; off {
			continue
		}
		mapped, err := v.addr(p, service, a)
		if err != nil {
			return "", err
		}
		out = append(out, mapped)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("%s: every address is of a service that no chosen profile starts", list)
	}
	return strings.Join(out, ","), nil
}

// addr maps one host:port of service's environment.
func (v View) addr(p *types.Project, service, hostport string) (string, error) {
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
