package devstack

import (
	"fmt"
	"strconv"
)

// Ports are the native stack's TCP ports, all on 127.0.0.1. Each is moved by an
// environment variable, so that a machine where one is taken (a student's own
// PostgreSQL on 55432, another Kafka on 19092) can run the stack beside it.
// scripts/stack/ports.sh names the same variables with the same defaults for the
// scripts; deploy's TestPortsMatchTheScripts checks that the two agree.
type Ports struct {
	// Postgres is PostgreSQL's port (PGSTACK_PORT, default 55432).
	Postgres int
	// PostgresStandby is the port of PostgreSQL's standby, started only by
	// PG_NODES=2 postgres.sh, and the primary after a promotion
	// (PGSTACK_STANDBY_PORT, default 55433).
	PostgresStandby int
	// PostgresProxy is where Toxiproxy's proxy PostgresProxy listens
	// (PGSTACK_PROXY_PORT, default 25432).
	PostgresProxy int
	// ConsumerPostgresProxy is where Toxiproxy's proxy ConsumerPostgresProxy listens
	// (PGSTACK_CONSUMER_PROXY_PORT, default 25433).
	ConsumerPostgresProxy int
	// KafkaDirect is Kafka's DIRECT listener (KAFKASTACK_DIRECT_PORT, default 19092).
	KafkaDirect int
	// KafkaController is Kafka's KRaft controller listener
	// (KAFKASTACK_CONTROLLER_PORT, default 19093).
	KafkaController int
	// KafkaProxied is where Kafka's PROXIED listener is bound (KAFKASTACK_PROXIED_PORT,
	// default 19094); it advertises KafkaProxy.
	KafkaProxied int
	// KafkaSASLSSL is Kafka's SASL_SSL listener, TLS with SCRAM users
	// (KAFKASTACK_SASL_SSL_PORT, default 19095): where the clients' TLS and SASL
	// options are tested (KafkaSASLSSL).
	KafkaSASLSSL int
	// KafkaProxy is where Toxiproxy's proxy RelayProxy listens, in front of
	// KafkaProxied (KAFKASTACK_PROXY_PORT, default 29092).
	KafkaProxy int
	// Toxiproxy is the Toxiproxy server's API (TOXISTACK_API_PORT, default 8474).
	Toxiproxy int
	// ClusterBase numbers the three-node cluster's ports (KAFKASTACK_CLUSTER_PORT,
	// default 21190): node n has DIRECT on ClusterBase+n, PROXIED on +100+n, its
	// Toxiproxy proxy on +200+n and CONTROLLER on +300+n.
	ClusterBase int
}

// A PortVar is one environment variable of Ports, with its default.
type PortVar struct {
	Name    string
	Default int
	field   func(*Ports) *int
}

// PortVars lists every variable of Ports, in the order of scripts/stack/ports.sh.
func PortVars() []PortVar {
	return []PortVar{
		{"PGSTACK_PORT", 55432, func(p *Ports) *int { return &p.Postgres }},
		{"PGSTACK_STANDBY_PORT", 55433, func(p *Ports) *int { return &p.PostgresStandby }},
		{"KAFKASTACK_DIRECT_PORT", 19092, func(p *Ports) *int { return &p.KafkaDirect }},
		{"KAFKASTACK_CONTROLLER_PORT", 19093, func(p *Ports) *int { return &p.KafkaController }},
		{"KAFKASTACK_PROXIED_PORT", 19094, func(p *Ports) *int { return &p.KafkaProxied }},
		{"KAFKASTACK_SASL_SSL_PORT", 19095, func(p *Ports) *int { return &p.KafkaSASLSSL }},
		{"KAFKASTACK_PROXY_PORT", 29092, func(p *Ports) *int { return &p.KafkaProxy }},
		{"PGSTACK_PROXY_PORT", 25432, func(p *Ports) *int { return &p.PostgresProxy }},
		{"PGSTACK_CONSUMER_PROXY_PORT", 25433, func(p *Ports) *int { return &p.ConsumerPostgresProxy }},
		{"TOXISTACK_API_PORT", 8474, func(p *Ports) *int { return &p.Toxiproxy }},
		{"KAFKASTACK_CLUSTER_PORT", 21190, func(p *Ports) *int { return &p.ClusterBase }},
	}
}

// DefaultPorts are the ports when no variable is set: those of docs/contract.md and
// of deploy/docker-compose.yml's published ports.
func DefaultPorts() Ports {
	var p Ports
	for _, v := range PortVars() {
		*v.field(&p) = v.Default
	}
	return p
}

// LoadPorts reads the ports from getenv: each variable of PortVars that is set, its
// default otherwise.
func LoadPorts(getenv func(string) string) (Ports, error) {
	p := DefaultPorts()
	for _, v := range PortVars() {
		s := getenv(v.Name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return Ports{}, fmt.Errorf("%s=%q is not a port number (scripts/stack/ports.sh lists the stack's ports)", v.Name, s)
		}
		*v.field(&p) = n
	}
	if p.ClusterBase > 65535-300-ClusterNodes {
		return Ports{}, fmt.Errorf("KAFKASTACK_CLUSTER_PORT=%d leaves no room for the cluster's ports, up to +%d", p.ClusterBase, 300+ClusterNodes)
	}
	return p, nil
}

// Environ returns the ports as NAME=value entries, for a command's environment: the
// scripts of scripts/stack then use the ports this process uses.
func (p Ports) Environ() []string {
	var env []string
	for _, v := range PortVars() {
		env = append(env, v.Name+"="+strconv.Itoa(*v.field(&p)))
	}
	return env
}

// AdminURL is the PostgreSQL admin URL of scripts/stack/postgres.sh. Its role may
// create databases.
func (p Ports) AdminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Postgres)
}

// PostgresUpstream is PostgreSQL's address, AdminURL's host and port.
func (p Ports) PostgresUpstream() string { return addr(p.Postgres) }

// PostgresStandbyUpstream is the address of PostgreSQL's standby (PG_NODES=2).
func (p Ports) PostgresStandbyUpstream() string { return addr(p.PostgresStandby) }

// FollowingURL is the URL of database name that follows the primary of PG_NODES=2
// postgres.sh: both nodes are listed, and pgx keeps the first that accepts writes
// (target_session_attrs=read-write), so a client reconnects to the standby once it is
// promoted. connect_timeout bounds the try of a node that does not answer.
// `PG_NODES=2 postgres.sh url` prints it for the database postgres.
func (p Ports) FollowingURL(name string) string {
	return fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		p.PostgresUpstream(), p.PostgresStandbyUpstream(), name)
}

// ProxiedPostgres is where the Toxiproxy proxy PostgresProxy listens; it forwards to
// PostgresUpstream.
func (p Ports) ProxiedPostgres() string { return addr(p.PostgresProxy) }

// ConsumerProxiedPostgres is where the Toxiproxy proxy ConsumerPostgresProxy listens; it
// forwards to PostgresUpstream.
func (p Ports) ConsumerProxiedPostgres() string { return addr(p.ConsumerPostgresProxy) }

// DirectBroker is Kafka's DIRECT listener, never behind a proxy: tests, the consumer,
// the chaos verifier, every admin request.
func (p Ports) DirectBroker() string { return addr(p.KafkaDirect) }

// SASLSSLBroker is Kafka's SASL_SSL listener: TLS with a certificate of the stack's own
// CA, and SCRAM users.
func (p Ports) SASLSSLBroker() string { return addr(p.KafkaSASLSSL) }

// ProxiedBroker is the Toxiproxy proxy RelayProxy in front of Kafka's PROXIED
// listener, which advertises this address, so a client seeded here keeps all its
// traffic behind the proxy.
func (p Ports) ProxiedBroker() string { return addr(p.KafkaProxy) }

// ToxiproxyAPI is the native Toxiproxy server's API.
func (p Ports) ToxiproxyAPI() string { return addr(p.Toxiproxy) }

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
