package redlock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

func init() {
	backends.Register(backends.Scheme{
		Name:    "redlock",
		Summary: "Redlock over N independent Redis masters: quorum N/2+1, restart quarantine, fencing tokens",
		Example: "redlock://:password@r1:6379,r2:6379,r3:6379/0?ttl=10s",
		Options: []backends.OptionDoc{
			{Name: "addr", Default: "none", Doc: "another node, host:port (repeatable; use it for IPv6 as addr=[::1]:6379)", Repeatable: true},
			{Name: "prefix", Default: "dsync:", Doc: "prefix of every Redis key and channel; no { or }"},
			{Name: "node_timeout", Default: "3% of the TTL, 50ms..1s", Doc: "per-node timeout of each fan-out"},
			{Name: "max_ttl", Default: DefaultMaxTTL.String(), Doc: "largest TTL of any client; length of the restart quarantine"},
			{Name: "quarantine", Default: "true", Doc: "false lets restarted nodes vote at once (unsafe; for tests)"},
			{Name: "tls", Default: "false", Doc: "connect to every node over TLS"},
			{Name: "dial_timeout", Default: "5s", Doc: "timeout to connect to a node"},
			{Name: "pool_size", Default: "10 per GOMAXPROCS", Doc: "connections per node"},
		},
		OpenDriver: openURL,
	})
}

// openURL opens redlock://[user:password@]h1:p1,h2:p2[/db][?options]. The
// host list and the addr= options are checked by backends.HostList and
// HostPort (every node needs its port), before any dial.
func openURL(ctx context.Context, u *url.URL, t backends.Telemetry) (backends.Driver, error) {
	q := u.Query()
	var hosts []string
	if u.Host != "" {
		var err error
		if hosts, err = backends.HostList(u.Host, ""); err != nil {
			if strings.Contains(err.Error(), "brackets") {
				// url.Parse takes no brackets after a comma.
				return nil, fmt.Errorf("%w (in a list, give each IPv6 node as an addr= option: redlock:///?addr=[::1]:6379&addr=[::1]:6380)", err)
			}
			return nil, err
		}
	}
	for _, a := range q["addr"] {
		h, err := backends.HostPort(a, "")
		if err != nil {
			return nil, fmt.Errorf("url option \"addr\": %w", err)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, backends.Invalid("url", "redlock needs at least one node: redlock://h1:6379,h2:6379,h3:6379")
	}
	var o Options
	o.Telemetry.Logger, o.Telemetry.MeterProvider = t.Logger, t.MeterProvider
	o.Prefix = q.Get("prefix")
	var err error
	if q.Has("node_timeout") {
		if o.NodeTimeout, err = backends.ParseDurationOption("node_timeout", q.Get("node_timeout")); err != nil {
			return nil, err
		}
	}
	if q.Has("max_ttl") {
		if o.MaxTTL, err = backends.ParseDurationOption("max_ttl", q.Get("max_ttl")); err != nil {
			return nil, err
		}
	}
	if q.Has("quarantine") {
		on, perr := strconv.ParseBool(q.Get("quarantine"))
		if perr != nil {
			return nil, backends.Invalid(`url option "quarantine"`, "%q is not true or false", q.Get("quarantine"))
		}
		o.NoQuarantine = !on
	}
	scheme := "redis"
	if q.Has("tls") {
		on, perr := strconv.ParseBool(q.Get("tls"))
		if perr != nil {
			return nil, backends.Invalid(`url option "tls"`, "%q is not true or false", q.Get("tls"))
		}
		if on {
			scheme = "rediss"
		}
	}
	// Every node gets the same credentials, database and client options;
	// go-redis parses them from a per-node URL.
	nodeQuery := url.Values{}
	for _, k := range []string{"dial_timeout", "pool_size"} {
		if q.Has(k) {
			nodeQuery.Set(k, q.Get(k))
		}
	}
	var nodes []*goredis.Options
	for _, h := range hosts {
		nu := url.URL{Scheme: scheme, User: u.User, Host: h, Path: u.Path, RawQuery: nodeQuery.Encode()}
		no, perr := goredis.ParseURL(nu.String())
		if perr != nil {
			// dsync.Open scrubs the URL's password from any error it returns.
			return nil, backends.Invalid("url", "node %q: %s", h, perr)
		}
		nodes = append(nodes, no)
	}
	d, _, err := newDriver(ctx, nodes, &o, newWorkers())
	if err != nil {
		return nil, err
	}
	return d, nil
}
