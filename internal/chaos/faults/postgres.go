package faults

import (
	"fmt"
	"net/url"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// PostgresProxy returns the stack's Toxiproxy proxy in front of the API's PostgreSQL
// (devstack.PostgresProxy), creating it as scripts/stack/toxiproxy.sh does when the
// stack was started before it existed.
func PostgresProxy(ports devstack.Ports) (*toxiproxy.Proxy, error) {
	return stackProxy(ports, devstack.PostgresProxy, ports.ProxiedPostgres())
}

// ConsumerPostgresProxy returns the stack's Toxiproxy proxy in front of the consumer's
// database (devstack.ConsumerPostgresProxy), creating it the same way.
func ConsumerPostgresProxy(ports devstack.Ports) (*toxiproxy.Proxy, error) {
	return stackProxy(ports, devstack.ConsumerPostgresProxy, ports.ConsumerProxiedPostgres())
}

// stackProxy returns the stack's proxy name, listening on listen in front of
// PostgreSQL, creating it when the stack was started before it existed.
func stackProxy(ports devstack.Ports, name, listen string) (*toxiproxy.Proxy, error) {
	cl := toxiproxy.NewClient(ports.ToxiproxyAPI())
	proxy, err := cl.Proxy(name)
	if err == nil {
		return proxy, nil
	}
	if !strings.Contains(err.Error(), "404") {
		return nil, fmt.Errorf("find Toxiproxy proxy %s: %w", name, err)
	}
	proxy, err = cl.CreateProxy(name, listen, ports.PostgresUpstream())
	if err != nil {
		return nil, fmt.Errorf("create Toxiproxy proxy %s: %w", name, err)
	}
	return proxy, nil
}

// CleanProxy enables the proxy and removes its toxics.
func CleanProxy(proxy *toxiproxy.Proxy) error {
	toxics, err := proxy.Toxics()
	if err != nil {
		return fmt.Errorf("list toxics of %s: %w", proxy.Name, err)
	}
	for _, t := range toxics {
		if err := proxy.RemoveToxic(t.Name); err != nil {
			return fmt.Errorf("remove toxic %s of %s: %w", t.Name, proxy.Name, err)
		}
	}
	if !proxy.Enabled {
		if err := proxy.Enable(); err != nil {
			return fmt.Errorf("enable %s: %w", proxy.Name, err)
		}
	}
	return nil
}

// ThroughProxy is dbURL with its host and port replaced by proxy's.
func ThroughProxy(dbURL, proxy string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = proxy
	return u.String()
}
