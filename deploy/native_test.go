package deploy

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// The files of the native stack and the contract that the compose stack must mirror,
// relative to this package's directory (go test runs in it).
var (
	kafkaPropertiesPath = filepath.Join("..", "scripts", "stack", "kafka", "server.properties.tmpl")
	kafkaScriptPath     = filepath.Join("..", "scripts", "stack", "kafka.sh")
	contractPath        = filepath.Join("..", "docs", "contract.md")
)

// readProperties parses a Java properties file of simple key=value lines, the only form
// server.properties.tmpl uses.
func readProperties(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open native Kafka config: %v", err)
	}
	defer f.Close()
	props := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not key=value", path, line)
		}
		props[strings.TrimSpace(key)] = strings.TrimSpace(value)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if len(props) == 0 {
		t.Fatalf("%s: no properties found", path)
	}
	return props
}

// nativeBrokerProperties is the native broker's server.properties as kafka.sh renders
// it with the default ports, those that deploy/docker-compose.yml publishes.
func nativeBrokerProperties(t *testing.T) map[string]string {
	t.Helper()
	ports := devstack.DefaultPorts()
	render := strings.NewReplacer(
		"@DIRECT_PORT@", strconv.Itoa(ports.KafkaDirect),
		"@PROXIED_PORT@", strconv.Itoa(ports.KafkaProxied),
		"@PROXY_PORT@", strconv.Itoa(ports.KafkaProxy),
		"@CONTROLLER_PORT@", strconv.Itoa(ports.KafkaController),
	)
	props := readProperties(t, kafkaPropertiesPath)
	for key, value := range props {
		props[key] = render.Replace(value)
	}
	return props
}

// kafkaEnvName is the apache/kafka image's name for a broker property: dots become
// underscores, underscores double, dashes triple, upper case, KAFKA_ prefix.
func kafkaEnvName(property string) string {
	name := strings.NewReplacer("-", "___", "_", "__", ".", "_").Replace(property)
	return "KAFKA_" + strings.ToUpper(name)
}

// A listener is one NAME://host:port entry of listeners or advertised.listeners.
type listener struct {
	host string
	port string
}

// parseListeners splits "A://host:port,B://:port" into a map by listener name.
func parseListeners(t *testing.T, value string) map[string]listener {
	t.Helper()
	out := map[string]listener{}
	for entry := range strings.SplitSeq(value, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(entry), "://")
		if !ok {
			t.Fatalf("listener %q has no NAME://", entry)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("listener %q: %v", entry, err)
		}
		out[name] = listener{host: host, port: port}
	}
	return out
}

// shellVariable returns the value of a NAME=value assignment in a shell script.
func shellVariable(t *testing.T, path, name string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `=(\S+)$`)
	m := re.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: no %s= line", path, name)
	}
	return strings.Trim(string(m[1]), `"'`)
}

// contractEnvVars returns, for each binary whose environment table docs/contract.md
// documents (its heading line is "`cmd/api`:"), the variable names in the table's first
// column. A cell may hold several names, and a name may end in * (a prefix, e.g. RELAY_*).
func contractEnvVars(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatalf("read contract: %v", err)
	}
	heading := regexp.MustCompile("^`(cmd/[a-z]+)`:$")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`")
	out := map[string][]string{}
	current := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if m := heading.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if current == "" {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if line != "" {
				current = "" // the table ended
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			out[current] = append(out[current], m[1])
		}
	}
	return out
}

// matchesContract reports whether a variable is documented: named exactly, or covered by
// a documented prefix such as RELAY_*.
func matchesContract(variable string, documented []string) bool {
	for _, d := range documented {
		if d == variable {
			return true
		}
		if prefix, ok := strings.CutSuffix(d, "*"); ok && strings.HasPrefix(variable, prefix) {
			return true
		}
	}
	return false
}
