package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// fileProcesses starts the compose file's services of the project image (cmd/api and
// cmd/consumer, as the compose stack's api, api-2 and consumer) as processes on the
// native stack, each with exactly the environment the file gives it, seen through a
// view that maps the file's addresses to the native stack's and its databases, topic
// and consumer group to fresh ones (the native stack is shared). It is the test's
// Services: everything else of a compose run is Run's.
type fileProcesses struct {
	project *types.Project
	view    View
	// binaries maps a binary the file runs (/usr/local/bin/<name>) to its build.
	binaries map[string]string
	// services are the services started, with the address each listens on; admin the
	// address of each one's admin listener (ADMIN_ADDR), when the file gives it one.
	services map[string]string
	admin    map[string]string
	// topic is the fresh name of the topic the file's kafka-init creates, with its
	// partitions.
	topic      string
	partitions int32
	logDir     string
	// ports are the native stack's, which the file's addresses map to.
	ports devstack.Ports

	procs []*stack.Process
}

// composeNative is the native side of a compose run: fresh names for the file's
// databases, topic and group, a port for each service of the project image, and the
// view that maps the file onto the native stack with them.
func composeNative(p *types.Project, ports devstack.Ports, binaries map[string]string, logDir string) (*fileProcesses, error) {
	fp := &fileProcesses{project: p, ports: ports, binaries: binaries, services: map[string]string{}, admin: map[string]string{}, logDir: logDir}
	for name, s := range p.Services {
		if strings.HasPrefix(s.Image, "payments-outbox:") {
			addr, err := stack.FreeAddr()
			if err != nil {
				return nil, err
			}
			fp.services[name] = addr
			if s.Environment["ADMIN_ADDR"] != nil {
				if fp.admin[name], err = stack.FreeAddr(); err != nil {
					return nil, err
				}
			}
		}
	}
	databases, err := composeInitDatabases(p)
	if err != nil {
		return nil, err
	}
	topic, partitions, err := composeInitTopic(p)
	if err != nil {
		return nil, err
	}
	run := devstack.UniqueName("compose_")
	fp.topic, fp.partitions = strings.ReplaceAll(run, "_", "-")+"-events", partitions
	fp.view.Databases = map[string]string{}
	for _, db := range databases {
		fp.view.Databases[db] = run + "_" + db
	}
	fp.view.Names = map[string]string{topic: fp.topic}
	if group := p.Services[composeConsumer].Environment["KAFKA_GROUP"]; group != nil {
		// The native broker's consumer groups are shared too.
		fp.view.Names[*group] = strings.ReplaceAll(run, "_", "-") + "-" + *group
	}
	tp, err := readComposeToxiproxy(p)
	if err != nil {
		return nil, err
	}
	// What no native server stands for (the trace collector) gets an address where
	// nothing listens, as a container that is not running.
	absent, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	fp.view.Addr = func(service, port string) (string, error) {
		return nativeAddr(p, ports, tp, fp.services, fp.admin, absent, service, port)
	}
	return fp, nil
}

// nativeAddr maps a service's container port to the native stack, from the file and
// the native stack's ports: the postgres service is PostgreSQL at Ports.PostgresUpstream;
// the kafka service's DIRECT listener, and its listener for the host, are
// Ports.DirectBroker; the toxiproxy service's API port is Ports.ToxiproxyAPI and each proxy port of its
// configuration is the native address of the proxy of that name.
func nativeAddr(p *types.Project, ports devstack.Ports, tp composeToxiproxyConfig, started, admin map[string]string, absent, service, port string) (string, error) {
	if addr, ok := started[service]; ok {
		// The ports the file has the service listen on (HTTP_ADDR, ADMIN_ADDR), and no
		// other.
		if listen := p.Services[service].Environment["ADMIN_ADDR"]; listen != nil && strings.HasSuffix(*listen, ":"+port) {
			return admin[service], nil
		}
		if listen := p.Services[service].Environment["HTTP_ADDR"]; listen == nil || !strings.HasSuffix(*listen, ":"+port) {
			return "", fmt.Errorf("%s:%s: the service listens on no such port", service, port)
		}
		return addr, nil
	}
	switch service {
	case "postgres":
		// The container port the file publishes: where the server listens.
		if _, ok := published(p.Services[service], port); !ok {
			return "", fmt.Errorf("postgres:%s: the server listens on no such port", port)
		}
		return ports.PostgresUpstream(), nil
	case "kafka":
		l, err := parseKafkaListeners(p.Services[service])
		if err != nil {
			return "", err
		}
		if port == l.direct.port || port == l.hostContainerPort {
			return ports.DirectBroker(), nil
		}
		return "", fmt.Errorf("kafka:%s is listener %q, which the native broker has for nobody but the proxy", port, l.byPort[port])
	case composeToxiproxy:
		if port == tp.APIPort {
			return ports.ToxiproxyAPI(), nil
		}
		native := map[string]string{devstack.RelayProxy: ports.ProxiedBroker(), devstack.PostgresProxy: ports.ProxiedPostgres()}
		if addr, ok := native[tp.Proxies[port]]; ok {
			return addr, nil
		}
		return "", fmt.Errorf("toxiproxy:%s is no proxy of the native stack (proxy %q)", port, tp.Proxies[port])
	}
	return absent, nil
}

// Up creates the fresh databases and topic, then starts every service with its
// environment from the file and waits for its /healthz.
func (fp *fileProcesses) Up(ctx context.Context) error {
	for _, db := range fp.view.Databases {
		if _, err := devstack.CreateDatabase(ctx, fp.ports.AdminURL(), db); err != nil {
			return err
		}
	}
	err := withAdmin([]string{fp.ports.DirectBroker()}, func(adm *kadm.Client) error {
		return devstack.CreateTopic(ctx, adm, fp.topic, fp.partitions)
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(fp.services))
	for name := range fp.services {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := fp.project.Services[name]
		binary := fp.binaries[filepath.Base(s.Entrypoint[0])]
		if binary == "" {
			return fmt.Errorf("service %s runs %q, which is not one of our binaries", name, s.Entrypoint[0])
		}
		env, err := fp.view.Env(fp.project, name)
		if err != nil {
			return err
		}
		// env -i: the process gets the file's environment and nothing of the test's.
		argv := []string{"env", "-i"}
		for k, v := range env {
			argv = append(argv, k+"="+v)
		}
		proc := &stack.Process{Name: name, Argv: append(argv, binary), LogPath: filepath.Join(fp.logDir, name+".log"), BaseURL: "http://" + fp.services[name]}
		if err := proc.Start(); err != nil {
			return err
		}
		fp.procs = append(fp.procs, proc)
	}
	for _, proc := range fp.procs {
		if err := proc.WaitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// APIKey runs the file's api binary as "api keys create", with the api service's
// environment (its DATABASE_URL), as DockerCompose runs it in a one-off container.
func (fp *fileProcesses) APIKey(ctx context.Context) (string, error) {
	env, err := fp.view.Env(fp.project, composeAPI)
	if err != nil {
		return "", err
	}
	return load.CreateAPIKey(ctx, fp.binaries[filepath.Base(fp.project.Services[composeAPI].Entrypoint[0])], env["DATABASE_URL"])
}

// Down stops the processes and removes the databases and the topic.
func (fp *fileProcesses) Down(ctx context.Context) error {
	var errs []error
	for _, proc := range fp.procs {
		if err := proc.Stop(15 * time.Second); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
	}
	fp.procs = nil
	for _, db := range fp.view.Databases {
		errs = append(errs, devstack.DropDatabase(ctx, fp.ports.AdminURL(), db))
	}
	errs = append(errs, withAdmin([]string{fp.ports.DirectBroker()}, func(adm *kadm.Client) error {
		return devstack.DeleteTopic(ctx, adm, fp.topic)
	}))
	return errors.Join(errs...)
}

// composeInitDatabases reads the databases the postgres service's init scripts create
// (CREATE DATABASE lines of the files mounted into /docker-entrypoint-initdb.d/).
func composeInitDatabases(p *types.Project) ([]string, error) {
	create := regexp.MustCompile(`(?mi)^\s*CREATE DATABASE\s+"?([a-z0-9_]+)"?\s*;`)
	var dbs []string
	for _, v := range p.Services["postgres"].Volumes {
		if v.Type != types.VolumeTypeBind || !strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") {
			continue
		}
		data, err := os.ReadFile(v.Source)
		if err != nil {
			return nil, fmt.Errorf("read the postgres init script: %w", err)
		}
		for _, m := range create.FindAllStringSubmatch(string(data), -1) {
			dbs = append(dbs, m[1])
		}
	}
	if len(dbs) == 0 {
		return nil, errors.New("the postgres service's init scripts create no database")
	}
	return dbs, nil
}

// composeInitTopic reads the topic the kafka-init service creates and its partitions.
func composeInitTopic(p *types.Project) (string, int32, error) {
	args := []string(p.Services["kafka-init"].Entrypoint)
	flag := func(name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	topic := flag("--topic")
	partitions, err := strconv.Atoi(flag("--partitions"))
	if topic == "" || err != nil {
		return "", 0, fmt.Errorf("kafka-init %q: want --topic NAME --partitions N", args)
	}
	return topic, int32(partitions), nil
}

// withAdmin runs f with a Kafka admin client seeded at brokers, closed when f returns.
func withAdmin(brokers []string, f func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("new Kafka admin client: %w", err)
	}
	defer cl.Close()
	return f(kadm.NewClient(cl))
}
