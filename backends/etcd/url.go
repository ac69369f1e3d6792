package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync/backends"
)

const (
	// defaultPort is etcd's client port, used for a host given without one.
	defaultPort = "2379"
	// defaultDialTimeout bounds the open of a URL-opened driver, unless the
	// caller's context ends earlier.
	defaultDialTimeout = 5 * time.Second
	// defaultKeepAliveTime and defaultKeepAliveTimeout are the client's
	// gRPC keepalive, which detects a member that vanished without closing
	// its connections, so that the client moves to another member.
	defaultKeepAliveTime    = 10 * time.Second
	defaultKeepAliveTimeout = 5 * time.Second
)

func init() {
	backends.Register(backends.Scheme{
		Name:       "etcd",
		Summary:    "etcd cluster: locks and semaphores on leases and transactions, fenced by create revisions",
		Example:    "etcd://user:password@10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp?ttl=30s",
		Options:    urlOptions(false),
		OpenDriver: openURL,
	})
	backends.Register(backends.Scheme{
		Name:       "etcds",
		Summary:    "etcd cluster over TLS: locks and semaphores on leases and transactions, fenced by create revisions",
		Example:    "etcds://10.0.0.1:2379,10.0.0.2:2379/myapp?ca_file=/etc/etcd/ca.pem&cert_file=/etc/etcd/client.pem&key_file=/etc/etcd/client-key.pem",
		Options:    urlOptions(true),
		OpenDriver: openURL,
	})
}

// urlOptions documents the query options the etcd schemes accept.
func urlOptions(secure bool) []backends.OptionDoc {
	opts := []backends.OptionDoc{
		{Name: "dial_timeout", Default: "5s", Doc: "bound on connecting, authenticating and probing the cluster at open (or the context's deadline, if earlier)"},
		{Name: "keepalive_time", Default: "10s", Doc: "interval of gRPC keepalive pings, which detect a member that vanished so the client moves to another; 0 disables"},
		{Name: "keepalive_timeout", Default: "5s", Doc: "wait for a keepalive ping's answer before the connection is dropped"},
		{Name: "request_timeout", Default: "5s", Doc: "bound on each call (an attempt, a refresh, a release, a read), with the caller's context"},
	}
	if secure {
		opts = append(opts,
			backends.OptionDoc{Name: "ca_file", Default: "the system's roots", Doc: "PEM file of the certificate authorities that sign the members' certificates"},
			backends.OptionDoc{Name: "cert_file", Default: "none", Doc: "PEM client certificate, for members that require one (with key_file)"},
			backends.OptionDoc{Name: "key_file", Default: "none", Doc: "PEM private key of cert_file"},
			backends.OptionDoc{Name: "skip_verify", Default: "false", Doc: "skip TLS certificate verification (testing only)"},
		)
	}
	return opts
}

// openURL opens a driver for etcd[s]://[user:password@]h1[:port],h2[:port]...[/prefix][?opts]
// and probes the cluster within ctx with a lease grant, which needs a
// quorum and tells the cluster's minimum lease TTL. dsync.Open has already
// rejected options not in urlOptions.
func openURL(ctx context.Context, u *url.URL, _ backends.Telemetry) (backends.Driver, error) {
	if u.Host == "" {
		return nil, backends.Invalid("url", "no host (want %s://host1:2379,host2:2379/prefix)", u.Scheme)
	}
	endpoints, err := backends.HostList(u.Host, defaultPort)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		Logger:               zap.NewNop(),
		DialKeepAliveTime:    defaultKeepAliveTime,
		DialKeepAliveTimeout: defaultKeepAliveTimeout,
	}
	dialTimeout := defaultDialTimeout
	opts := &Options{Prefix: strings.TrimPrefix(u.Path, "/")}
	for _, o := range []struct {
		name string
		dst  *time.Duration
		zero bool // 0 allowed
	}{
		{"dial_timeout", &dialTimeout, false},
		{"keepalive_time", &cfg.DialKeepAliveTime, true},
		{"keepalive_timeout", &cfg.DialKeepAliveTimeout, false},
		{"request_timeout", &opts.RequestTimeout, false},
	} {
		if !q.Has(o.name) {
			continue
		}
		v := q.Get(o.name)
		if o.zero && v == "0" {
			*o.dst = 0
			continue
		}
		if *o.dst, err = backends.ParseDurationOption(o.name, v); err != nil {
			return nil, err
		}
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if u.User.Username() == "" || !ok || pw == "" {
			return nil, backends.Invalid("url", "userinfo needs both a user name and a password (user:password@)")
		}
		cfg.Username, cfg.Password = u.User.Username(), pw
	}
	if strings.EqualFold(u.Scheme, "etcds") {
		if cfg.TLS, err = tlsConfig(q); err != nil {
			return nil, err
		}
	}

	// The open is bounded by the earlier of ctx's deadline and dial_timeout.
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	where := "etcd at " + strings.Join(endpoints, ",")
	// The client outlives ctx, but its authentication at creation must not:
	// cancel the client if ctx ends before the open completes.
	clientCtx, cancelClient := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancelClient)
	defer stop()
	cfg.Context = clientCtx
	deadline, _ := ctx.Deadline()
	cfg.DialTimeout = max(time.Until(deadline), time.Millisecond)

	client, err := clientv3.New(cfg)
	if err != nil {
		cancelClient()
		return nil, fmt.Errorf("%s: %w", where, joinCtx(ctx, err))
	}
	probe, err := client.Grant(ctx, 1)
	if err != nil {
		var cause error
		if !isServerError(err) {
			cause = connError(client)
		}
		_ = client.Close()
		cancelClient()
		if isServerError(err) {
			// The cluster answered: permission denied, no leader...
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		err = joinCtx(ctx, err)
		if cause != nil {
			err = fmt.Errorf("%w (last connection error: %v)", err, cause)
		}
		return nil, fmt.Errorf("%w: %s: unreachable: %w", backends.ErrUnavailable, where, err)
	}
	opts.MinTTL = time.Duration(probe.TTL) * time.Second
	d, err := newDriver(client, opts, true)
	if err != nil {
		_ = client.Close()
		cancelClient()
		return nil, err
	}
	d.revoke(ctx, probe.ID) // the probe's lease holds no key
	if !stop() {
		// ctx ended just now and cancelled the client.
		_ = d.Close()
		return nil, fmt.Errorf("%s: %w", where, ctx.Err())
	}
	return d, nil
}

// tlsConfig builds the TLS configuration of an etcds URL.
func tlsConfig(q url.Values) (*tls.Config, error) {
	// The members' certificates are verified against each endpoint's host
	// name: gRPC sets tls.Config.ServerName from the endpoint, so the URL
	// must name members as their certificates do.
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if q.Has("skip_verify") {
		skip, err := strconv.ParseBool(q.Get("skip_verify"))
		if err != nil {
			return nil, backends.Invalid(`url option "skip_verify"`, "%q is not a boolean", q.Get("skip_verify"))
		}
		tc.InsecureSkipVerify = skip
	}
	if f := q.Get("ca_file"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, backends.Invalid(`url option "ca_file"`, "%v", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, backends.Invalid(`url option "ca_file"`, "no PEM certificate in %s", f)
		}
	}
	cert, key := q.Get("cert_file"), q.Get("key_file")
	if (cert == "") != (key == "") {
		return nil, backends.Invalid(`url option "cert_file"`, "cert_file and key_file go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, backends.Invalid(`url option "cert_file"`, "%v", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// connErrorTimeout bounds connError's call.
const connErrorTimeout = 50 * time.Millisecond

// connError returns why the client cannot connect, if it says: a call that
// does not wait for a connection fails with the last connection error (a
// refused dial, a TLS handshake failure), which the probe, waiting until
// its deadline, only reports as the deadline.
func connError(client *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), connErrorTimeout)
	defer cancel()
	_, err := pb.NewMaintenanceClient(client.ActiveConnection()).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable {
		return errors.New(s.Message())
	}
	return nil
}

// isServerError reports an error the cluster sent, as opposed to a failure
// to reach it.
func isServerError(err error) bool {
	var ee rpctypes.EtcdError
	return errors.As(err, &ee) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// joinCtx adds ctx's error to err when ctx ended and err does not say so.
func joinCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return errors.Join(err, ctx.Err())
	}
	return err
}
