package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
)

// probeTimeout bounds the PING of a URL-opened driver when the caller's
// context has no deadline.
const probeTimeout = 5 * time.Second

func init() {
	backends.Register(backends.Scheme{
		Name:       "redis",
		Summary:    "one Redis server by its address (Sentinel and Cluster: redis.New over your go-redis client): efficiency-grade locks and semaphores with fencing",
		Example:    "redis://:password@localhost:6379/0?prefix=myapp:",
		Options:    urlOptions(false),
		OpenDriver: openURL,
	})
	backends.Register(backends.Scheme{
		Name:       "rediss",
		Summary:    "one Redis server over TLS: efficiency-grade locks and semaphores with fencing",
		Example:    "rediss://user:password@redis.example.com:6380/0",
		Options:    urlOptions(true),
		OpenDriver: openURL,
	})
}

// urlOptions documents the query options the redis schemes accept: prefix,
// which is dsync's, and the go-redis connection options that
// goredis.ParseURL reads.
func urlOptions(tls bool) []backends.OptionDoc {
	opts := []backends.OptionDoc{
		{Name: "prefix", Default: DefaultPrefix, Doc: "prefix of every Redis key and channel dsync uses; no { or }"},
		{Name: "db", Default: "0, or the URL path /N", Doc: "database number (overrides the path)"},
		{Name: "protocol", Default: "3", Doc: "RESP protocol version, 2 or 3"},
		{Name: "client_name", Default: "none", Doc: "CLIENT SETNAME for each connection"},
		{Name: "max_retries", Default: "-1 (none)", Doc: "go-redis retries of a failed command; none keeps one attempt per call (dsync retries on its own, knowing what is safe to repeat)"},
		{Name: "min_retry_backoff", Default: "10ms", Doc: "smallest delay between go-redis retries"},
		{Name: "max_retry_backoff", Default: "1s", Doc: "largest delay between go-redis retries"},
		{Name: "dial_timeout", Default: "5s", Doc: "timeout to establish a connection; a plain number is seconds"},
		{Name: "read_timeout", Default: "5s", Doc: "socket read timeout (calls are also bounded by their context); <= 0 disables"},
		{Name: "write_timeout", Default: "read_timeout", Doc: "socket write timeout; <= 0 disables"},
		{Name: "pool_fifo", Default: "false", Doc: "use the connection pool first-in first-out"},
		{Name: "pool_size", Default: "10 per GOMAXPROCS", Doc: "connections in the pool"},
		{Name: "pool_timeout", Default: "read_timeout + 1s", Doc: "wait for a free connection when all are busy"},
		{Name: "min_idle_conns", Default: "0", Doc: "idle connections kept open"},
		{Name: "max_idle_conns", Default: "0 (no limit)", Doc: "most idle connections kept open"},
		{Name: "max_active_conns", Default: "0 (no limit)", Doc: "most connections open at once"},
		{Name: "conn_max_idle_time", Default: "30m", Doc: "close connections idle this long; <= 0 disables"},
		{Name: "conn_max_lifetime", Default: "0 (no limit)", Doc: "close connections this old"},
	}
	if tls {
		opts = append(opts, backends.OptionDoc{Name: "skip_verify", Default: "false", Doc: "skip TLS certificate verification (testing only)"})
	}
	return opts
}

// openURL opens a driver for redis://[user:password@]host[:port][/db][?opts]
// (or rediss://) and probes the server with PING within ctx. The host is
// checked first (backends.HostPort: the port defaults to 6379; an IPv6
// address needs brackets), before any dial. dsync.Open has already
// rejected options not in urlOptions.
func openURL(ctx context.Context, u *url.URL, _ backends.Telemetry) (backends.Driver, error) {
	if u.Host == "" {
		return nil, backends.Invalid("url", "no host: want %s://host:6379 (an empty host does not mean localhost)", u.Scheme)
	}
	if _, err := backends.HostPort(u.Host, "6379"); err != nil {
		return nil, err
	}
	q := u.Query()
	var opts Options
	if q.Has("prefix") {
		opts.Prefix = q.Get("prefix")
		if opts.Prefix == "" {
			return nil, backends.Invalid(`url option "prefix"`, "empty (leave it out for the default %q)", DefaultPrefix)
		}
		if err := redisnode.CheckPrefix(opts.Prefix); err != nil {
			return nil, backends.Invalid(`url option "prefix"`, "%s", err)
		}
	}
	// What is left after dsync's own options is go-redis's to parse.
	q.Del("prefix")
	for _, o := range backends.CommonOptions() {
		q.Del(o.Name)
	}
	rest := *u
	rest.RawQuery = q.Encode()
	ro, err := goredis.ParseURL(rest.String())
	if err != nil {
		return nil, backends.Invalid("url", "%s", err)
	}
	if !q.Has("max_retries") {
		ro.MaxRetries = -1
	}
	ro = redisnode.Own(ro)

	client := goredis.NewClient(ro)
	d, err := newDriver(client, &opts, true)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = d.Close()
		var rerr goredis.Error
		if errors.As(err, &rerr) {
			// The server answered: wrong password, bad database number...
			return nil, fmt.Errorf("redis at %s: %w", ro.Addr, err)
		}
		return nil, fmt.Errorf("%w: redis at %s: unreachable: %w", backends.ErrUnavailable, ro.Addr, err)
	}
	return d, nil
}
