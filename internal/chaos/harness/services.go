package harness

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// ServiceCommands are the command lines that start a student's API and consumer, so
// that the harness owns their processes as it owns ours: it starts them on a fresh
// database and topic, SIGKILLs them and restarts them, and the crash scenarios can run.
//
// Each line is run by /bin/sh -c in its own process group, from the directory the
// harness was started in, every time the process starts: "./bin/api migrate && exec
// ./bin/api" prepares the schema and then serves, and runs again after each kill. The
// environment is the contract's (docs/contract.md, "Environment variables"), so a
// service that reads those names needs no glue.
type ServiceCommands struct {
	// API starts the HTTP API and its relay. Required.
	API string
	// Consumer starts the antifraud consumer. Required.
	Consumer string
}

// Validate says what is missing, in the words of cmd/chaos's flags.
func (c ServiceCommands) Validate() error {
	var errs []error
	if strings.TrimSpace(c.API) == "" {
		errs = append(errs, errors.New("-api-cmd is empty: give the command line that starts the API"))
	}
	if strings.TrimSpace(c.Consumer) == "" {
		errs = append(errs, errors.New("-consumer-cmd is empty: give the command line that starts the consumer"))
	}
	return errors.Join(errs...)
}

// shellArgv runs a command line the way a terminal would, through the shell.
func shellArgv(line string) []string { return []string{"/bin/sh", "-c", line} }

// serviceEnv is what one run hands to the services: its fresh databases and topic and
// the addresses the harness picked. Names are the contract's, for ours and a student's.
type serviceEnv struct {
	// RelayMode is the API's RELAY_MODE (Options.RelayMode).
	RelayMode    string
	PaymentsDB   string
	ConsumerDB   string
	Topic        string
	Group        string
	APIAddr      string
	ConsumerAddr string
	// AdminAddr is our API's ADMIN_ADDR (/metrics, /admin/), ReplicaAdminAddr its
	// replica's; a student's service serves /metrics on HTTP_ADDR and gets neither.
	AdminAddr        string
	ReplicaAdminAddr string
	// RelayBrokers are the API's seeds, behind Toxiproxy; ConsumerBrokers the
	// consumer's, on DIRECT.
	RelayBrokers    []string
	ConsumerBrokers []string
	// ReplicaAddr, when set, is the address of a second API process on the same
	// database (Scenario.Replicas).
	ReplicaAddr string
	// ProxiedPostgres is where the Toxiproxy proxy devstack.PostgresProxy listens
	// (Scenario.APIThroughPostgresProxy).
	ProxiedPostgres string
	// ConsumerProxiedPostgres is where the Toxiproxy proxy
	// devstack.ConsumerPostgresProxy listens (Scenario.ConsumerThroughPostgresProxy).
	ConsumerProxiedPostgres string
}

// api is the API's environment. Its relay bootstraps through Toxiproxy, where the
// faults act; nothing else of the run goes through the proxy.
func (e serviceEnv) api() []string {
	return []string{
		"DATABASE_URL=" + e.PaymentsDB,
		"KAFKA_BROKERS=" + strings.Join(e.RelayBrokers, ","),
		"KAFKA_TOPIC=" + e.Topic,
		"HTTP_ADDR=" + e.APIAddr,
	}
}

// consumer is the consumer's environment: the DIRECT listener, and a consumer group
// of the run's own, so the group's committed offsets are this run's alone.
func (e serviceEnv) consumer() []string {
	return []string{
		"DATABASE_URL=" + e.ConsumerDB,
		"KAFKA_BROKERS=" + strings.Join(e.ConsumerBrokers, ","),
		"KAFKA_TOPIC=" + e.Topic,
		"KAFKA_GROUP=" + e.Group,
		"HTTP_ADDR=" + e.ConsumerAddr,
	}
}

// processes returns the run's API and consumer. With cmds nil they are our binaries
// and get the scenario's extra environment, the reference service's knobs included;
// a student's commands get the contract's variables and the tuning that the contract
// lists as optional, never a knob only our services have.
func (e serviceEnv) processes(binaries map[string]string, cmds *ServiceCommands, sc Scenario, logDir string) (api, consumer *stack.Process) {
	apiEnv := e
	if sc.APIThroughPostgresProxy {
		// The API and its relay reach the database through the proxy; nothing else of
		// the run does, the verifier included.
		apiEnv.PaymentsDB = faults.ThroughProxy(e.PaymentsDB, e.ProxiedPostgres)
	}
	consumerEnv := e
	if sc.ConsumerThroughPostgresProxy {
		// The consumer alone reaches its database through the proxy; the verifier goes
		// direct.
		consumerEnv.ConsumerDB = faults.ThroughProxy(e.ConsumerDB, e.ConsumerProxiedPostgres)
	}
	if cmds == nil && e.RelayMode == verdict.RelayModeCDC {
		apiEnv.PaymentsDB = withWalSenderTimeout(apiEnv.PaymentsDB, CDCWalSenderTimeout)
	}
	api = &stack.Process{Name: "api", LogPath: filepath.Join(logDir, "api.log"), BaseURL: "http://" + e.APIAddr, Env: append(append(apiEnv.api(), relayEnv...), sc.APITuning...)}
	consumer = &stack.Process{Name: "consumer", LogPath: filepath.Join(logDir, "consumer.log"), BaseURL: "http://" + e.ConsumerAddr, Env: append(consumerEnv.consumer(), sc.ConsumerEnv...)}
	if cmds != nil {
		api.Argv, consumer.Argv = shellArgv(cmds.API), shellArgv(cmds.Consumer)
		return api, consumer
	}
	api.Argv, consumer.Argv = []string{binaries["./cmd/api"]}, []string{binaries["./cmd/consumer"]}
	api.AdminURL = "http://" + e.AdminAddr
	api.Env = append(api.Env, fmt.Sprintf("DUAL_WRITE=%t", sc.DualWrite), "RELAY_MODE="+e.RelayMode, "ADMIN_ADDR="+e.AdminAddr)
	api.Env = append(api.Env, sc.APIEnv...)
	consumer.Env = append(consumer.Env, sc.ReferenceConsumerEnv...)
	return api, consumer
}

// CDCWalSenderTimeout is the CDC relay's counterpart of RELAY_LEASE (relayEnv): a
// frozen relay keeps its replication slot, and the other replicas wait, until the
// server ends its walsender for want of a reply, after wal_sender_timeout (60 s by
// default, longer than any pause of a run). The relay answers the server's keepalives
// and reports its position at least every few seconds, so 10 s ends only a relay that
// is not running.
const CDCWalSenderTimeout = 10 * time.Second

// withWalSenderTimeout is dbURL with the server setting wal_sender_timeout set to d for
// its sessions (options=-c ..., a startup parameter): the setting is per connection, so
// the run's relay gets it without a change to the shared server.
func withWalSenderTimeout(dbURL string, d time.Duration) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set("options", fmt.Sprintf("-c wal_sender_timeout=%dms", d.Milliseconds()))
	// %20, not Encode's +, for a space: libpq reads + as itself.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// replica returns a second process of api, on the same database and topic, listening
// on e.ReplicaAddr: two relays share one outbox, as two replicas behind a load balancer.
func (e serviceEnv) replica(api *stack.Process, logDir string) *stack.Process {
	env := make([]string, 0, len(api.Env))
	for _, kv := range api.Env {
		if !strings.HasPrefix(kv, "HTTP_ADDR=") && !strings.HasPrefix(kv, "ADMIN_ADDR=") {
			env = append(env, kv)
		}
	}
	replica := &stack.Process{Name: "api-2", LogPath: filepath.Join(logDir, "api-2.log"), BaseURL: "http://" + e.ReplicaAddr,
		Argv: api.Argv, Env: append(env, "HTTP_ADDR="+e.ReplicaAddr)}
	if api.AdminURL != "" {
		replica.AdminURL = "http://" + e.ReplicaAdminAddr
		replica.Env = append(replica.Env, "ADMIN_ADDR="+e.ReplicaAdminAddr)
	}
	return replica
}
