package deploy

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// apiReplicas are the compose services that run the API, as `make chaos` runs two
// processes of it on one database (internal/chaos/harness/services.go, replica).
var apiReplicas = []string{"api", "api-2"}

// TestComposeReplicaIsTheAPI: the second replica is the first one started again, as the
// harness starts it: the same image, entrypoint and environment, HTTP_ADDR aside. A
// variable added to api alone would make the two relays of one outbox differ.
func TestComposeReplicaIsTheAPI(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	api, replica := service(t, p, apiReplicas[0]), service(t, p, apiReplicas[1])
	if replica.Image != api.Image || !slices.Equal(replica.Entrypoint, api.Entrypoint) {
		t.Errorf("%s runs %s %q, want %s's %s %q", replica.Name, replica.Image, replica.Entrypoint, api.Name, api.Image, api.Entrypoint)
	}
	values := func(env map[string]*string) map[string]string {
		out := map[string]string{}
		for name, v := range env {
			if name != "HTTP_ADDR" && v != nil {
				out[name] = *v
			}
		}
		return out
	}
	if diff := cmp.Diff(values(api.Environment), values(replica.Environment)); diff != "" {
		t.Errorf("environment of %s differs from %s's, HTTP_ADDR aside (-%s +%s):\n%s", replica.Name, api.Name, api.Name, replica.Name, diff)
	}
	if env(t, api, "HTTP_ADDR") == env(t, replica, "HTTP_ADDR") {
		t.Errorf("%s and %s both listen on %s", api.Name, replica.Name, env(t, api, "HTTP_ADDR"))
	}
}

// TestComposeK6SpreadsOverTheReplicas: k6's BASE_URLS name every API replica, at the
// address it listens on, and nothing else.
func TestComposeK6SpreadsOverTheReplicas(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	var want []string
	for _, name := range apiReplicas {
		_, port, err := net.SplitHostPort(env(t, service(t, p, name), "HTTP_ADDR"))
		if err != nil {
			t.Fatalf("%s HTTP_ADDR: %v", name, err)
		}
		want = append(want, "http://"+name+":"+port)
	}
	k6 := service(t, p, "k6")
	got := strings.Split(env(t, k6, "BASE_URLS"), ",")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("k6 BASE_URLS (-want +got):\n%s", diff)
	}
	if _, ok := k6.Environment["BASE_URL"]; ok {
		t.Error("k6 sets BASE_URL as well as BASE_URLS: the script reads BASE_URLS first, and one of them is a leftover")
	}
}

// TestComposeK6SendsTheAPIKey: the k6 service passes API_KEY on, and the script sends it
// with the requests of both its request builders (creations and transitions).
func TestComposeK6SendsTheAPIKey(t *testing.T) {
	t.Parallel()
	if _, ok := service(t, loadProject(t), "k6").Environment["API_KEY"]; !ok {
		t.Error("k6 does not pass API_KEY: our API answers 401 without a key")
	}
	script, err := os.ReadFile("../loadtest/k6/payments.js")
	if err != nil {
		t.Fatalf("read payments.js: %v", err)
	}
	if !strings.Contains(string(script), "__ENV.API_KEY") {
		t.Error("payments.js does not read API_KEY")
	}
	if n := strings.Count(string(script), "headers: withKey(") + strings.Count(string(script), "headers = withKey("); n != 2 {
		t.Errorf("payments.js builds %d request headers with withKey, want 2 (creation and transition)", n)
	}
}
