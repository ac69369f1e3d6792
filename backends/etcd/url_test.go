package etcd_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestSchemesRegistered(t *testing.T) {
	for _, name := range []string{"etcd", "etcds"} {
		has := backendtest.CheckScheme(t, name, "dial_timeout", "keepalive_time", "keepalive_timeout")
		for _, o := range []string{"ca_file", "cert_file", "key_file", "skip_verify"} {
			if has[o] != (name == "etcds") {
				t.Errorf("%s lists %s = %v, want it for etcds only", name, o, has[o])
			}
		}
	}
}

// openAndUse opens rawURL and takes a hold on key, and returns the backend,
// closed when the test ends.
func openAndUse(t *testing.T, rawURL, key string) *dsync.Backend {
	t.Helper()
	ctx := testutil.Context(t)
	b, err := dsync.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := lease.Driver(b).Acquire(ctx, req(key, "tok", time.Minute)); err != nil {
		t.Fatalf("Acquire through %s: %v", rawURL, err)
	}
	return b
}

func TestOpenURL(t *testing.T) {
	c := etcdtest.Start(t, nil)
	cli := c.Client(t)
	ctx := testutil.Context(t)
	exists := func(k string) bool {
		t.Helper()
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) == 1
	}

	t.Run("plain", func(t *testing.T) {
		b := openAndUse(t, c.URL(), "plain")
		if !exists("dsync/plain") {
			t.Error("hold not under the default prefix")
		}
		if caps := lease.Driver(b).Capabilities(); caps.Name != "etcd" || caps.MinTTL != c.MinLeaseTTL() {
			t.Errorf("capabilities %+v, want etcd with MinTTL %v", caps, c.MinLeaseTTL())
		}
	})
	t.Run("prefix and options", func(t *testing.T) {
		b := openAndUse(t, c.URL()+"/my/app?ttl=30s&retry_min=5ms&retry_max=1s&dial_timeout=2s&keepalive_time=0&keepalive_timeout=1s", "job")
		if !exists("my/app/job") {
			t.Error("hold not under the path's prefix my/app/")
		}
		if got := b.Defaults(); got.TTL != 30*time.Second || got.RetryMin != 5*time.Millisecond || got.RetryMax != time.Second {
			t.Errorf("Defaults() = %+v, want the URL's ttl and retry bounds", got)
		}
	})
	t.Run("a dead endpoint in the list", func(t *testing.T) {
		openAndUse(t, "etcd://127.0.0.1:1,"+c.Endpoint(0), "dead-first")
	})
	t.Run("close", func(t *testing.T) {
		b := openAndUse(t, c.URL(), "closing")
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := lease.Driver(b).Holder(ctx, "closing"); !errors.Is(err, backends.ErrClosed) {
			t.Errorf("Holder after Close = %v, want ErrClosed", err)
		}
	})
}

func TestOpenURLInvalid(t *testing.T) {
	for _, u := range []string{
		"etcd://127.0.0.1:1?bogus=1",           // unknown option: dsync.Open rejects it
		"etcd://127.0.0.1:1?skip_verify=true",  // etcds only
		"etcd://127.0.0.1:1?ca_file=/x",        // etcds only
		"etcd://127.0.0.1:1,,127.0.0.1:2",      // empty host
		"etcd://127.0.0.1:1,:2",                // empty host name
		"etcd://127.0.0.1:99999",               // bad port
		"etcd://127.0.0.1:0",                   // bad port
		"etcd://user@127.0.0.1:1",              // user without password
		"etcd://:pw@127.0.0.1:1",               // password without user
		"etcd://127.0.0.1:1?dial_timeout=soon", // not a duration
		"etcd://127.0.0.1:1?keepalive_time=-1s",
		"etcd://127.0.0.1:1?ttl=-1s", // common option, checked by the root
		"etcds://127.0.0.1:1?cert_file=/x",
		"etcds://127.0.0.1:1?ca_file=/nonexistent/ca.pem",
		"etcds://127.0.0.1:1?skip_verify=maybe",
		"etcd:///prefix", // no host
	} {
		t.Run(u, func(t *testing.T) {
			// 127.0.0.1:1 has no server: an invalid URL must fail before
			// any dial, with ErrInvalid.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			b, err := dsync.Open(ctx, u)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, backends.ErrInvalid) {
				t.Errorf("Open = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestOpenURLUnreachable(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"etcd://127.0.0.1:1,127.0.0.1:2/app",
		"etcd://root:s3cret@127.0.0.1:1,127.0.0.1:2/app", // authenticates at creation
	} {
		t.Run(u, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			b, err := dsync.Open(ctx, u)
			if err == nil {
				b.Close()
				t.Fatal("Open of 127.0.0.1:1 succeeded")
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Open took %v, beyond its 1s context", took)
			}
			msg := err.Error()
			if !strings.Contains(msg, "etcd at 127.0.0.1:1,127.0.0.1:2") {
				t.Errorf("error does not name the endpoints: %v", msg)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error leaks the password: %v", msg)
			}
			if !strings.Contains(u, "@") && !strings.Contains(msg, "connection refused") {
				t.Errorf("error does not give the connection error: %v", msg)
			}
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backends.ErrInvalid) {
				t.Errorf("error %v: want it to match context.DeadlineExceeded, not ErrInvalid", err)
			}
		})
	}
	// A cancelled (not timed-out) open also ends at once.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	if b, err := dsync.Open(ctx, "etcd://root:s3cret@127.0.0.1:1"); err == nil {
		b.Close()
		t.Fatal("Open succeeded")
	} else if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Errorf("cancelled Open = %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}

// TestDialTimeoutUnderLongerDeadline: dial_timeout bounds the open even
// when the context has a later deadline.
func TestDialTimeoutUnderLongerDeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nobody listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	b, err := dsync.Open(ctx, "etcd://"+addr+"/app?dial_timeout=1s")
	if err == nil {
		b.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Open took %v: dial_timeout=1s ignored under a 20 s context", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open = %v, want context.DeadlineExceeded", err)
	}
}

func TestOpenURLAuth(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	admin := c.Client(t)
	if _, err := admin.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	withUser := func(user *url.Userinfo) string {
		u, _ := url.Parse(c.URL())
		u.User = user
		return u.String()
	}

	openAndUse(t, withUser(url.UserPassword("root", "s3cret")), "authed")

	_, err := dsync.Open(ctx, withUser(url.UserPassword("root", "wrong-s3cret")))
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), "etcd at "+c.Endpoint(0)) || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("error %v: want the endpoint and the server's refusal", err)
	}
	if _, err := dsync.Open(ctx, c.URL()); err == nil {
		t.Error("Open without credentials of a cluster with auth succeeded")
	}
}

func TestOpenURLTLS(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, &etcdtest.Options{TLS: true})
	ctx := testutil.Context(t)
	f := c.TLS()
	hosts := strings.Join(c.Endpoints(), ",")

	b := openAndUse(t, c.URL(), "tls")
	if !strings.HasPrefix(b.String(), "etcds://") {
		t.Errorf("backend %s", b)
	}
	openAndUse(t, "etcds://"+hosts+"?skip_verify=true&cert_file="+f.ClientCert+"&key_file="+f.ClientKey, "tls-skip")
	localhost := strings.ReplaceAll(hosts, "127.0.0.1", "localhost") // the certificate names both
	openAndUse(t, "etcds://"+localhost+"?ca_file="+f.CA+"&cert_file="+f.ClientCert+"&key_file="+f.ClientKey, "tls-name")

	for _, tc := range []struct{ name, url, cause string }{
		{"no client certificate", "etcds://" + hosts + "?ca_file=" + f.CA, ""},
		{"unknown authority", "etcds://" + hosts + "?cert_file=" + f.ClientCert + "&key_file=" + f.ClientKey, "certificate signed by unknown authority"},
		{"plain text", "etcd://" + hosts, "last connection error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			octx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			b, err := dsync.Open(octx, tc.url)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), "etcd at "+hosts) || !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("error %v: want the endpoints and %q", err, tc.cause)
			}
		})
	}
}

// TestNewOverOwnClient: a backend over an application's own client, with
// the options of New; closing the backend leaves the client open.
func TestNewOverOwnClient(t *testing.T) {
	c := etcdtest.Start(t, nil)
	cli := c.Client(t)
	ctx := testutil.Context(t)
	b, err := etcd.New(cli, &etcd.Options{Prefix: "own", MinTTL: c.MinLeaseTTL(),
		BackendOptions: dsync.BackendOptions{Name: "own etcd", Defaults: dsync.Defaults{TTL: 3 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != "own etcd" || b.Defaults().TTL != 3*time.Second {
		t.Errorf("backend %q with defaults %+v: want the options' name and TTL", b, b.Defaults())
	}
	if _, err := etcd.New(cli, &etcd.Options{BackendOptions: dsync.BackendOptions{Defaults: dsync.Defaults{TTL: -time.Second}}}); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("New with a negative default TTL = %v, want ErrInvalid", err)
	}
	ls, err := newLocker(t, b, "k", nil).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "own/k"); err != nil {
		t.Fatalf("client closed with the backend: %v", err)
	}
}

// TestOpenURLMalformed: the URL table every scheme runs, before any dial.
func TestOpenURLMalformed(t *testing.T) {
	for _, scheme := range []string{"etcd", "etcds"} {
		t.Run(scheme, func(t *testing.T) {
			backendtest.CheckBadURLs(t, scheme+"://root:s3cret@HOST/app",
				backendtest.URLCase{URL: scheme + "://", Text: "no host (want " + scheme + "://host1:2379,host2:2379/prefix)"},
				backendtest.URLCase{URL: scheme + ":///prefix", Text: "no host"},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:1,,127.0.0.1:2", Text: "stray comma"},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:1,:2", Text: "empty host name"},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:99999,127.0.0.1:2", Text: `port "99999"`},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:1/?dial_timeout=1s&dial_timeout=2s", Text: "more than once"},
			)
		})
	}
}

// TestOpenURLIPv6Accepted: an IPv6 address in brackets, with or without a
// port, passes the URL checks (the open then fails for want of a server,
// naming the endpoint).
func TestOpenURLIPv6Accepted(t *testing.T) {
	for u, endpoint := range map[string]string{
		"etcd://[::1]:1/app": "[::1]:1",
		"etcd://[::1]/app":   "[::1]:2379",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		b, err := dsync.Open(ctx, u)
		cancel()
		if err == nil {
			b.Close()
			continue // an etcd on [::1]:2379: accepted all the same
		}
		if errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), "etcd at "+endpoint) {
			t.Errorf("Open(%s) = %v; want it to reach for %s, not ErrInvalid", u, err, endpoint)
		}
	}
}
