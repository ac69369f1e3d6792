package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestSchemesRegistered(t *testing.T) {
	for _, name := range []string{"redis", "rediss"} {
		has := backendtest.CheckScheme(t, name, "prefix", "db", "dial_timeout", "read_timeout", "write_timeout", "pool_size")
		if has["skip_verify"] != (name == "rediss") {
			t.Errorf("%s lists skip_verify = %v, want it for rediss only", name, has["skip_verify"])
		}
	}
}

// openAndUse opens rawURL, takes a hold on key with fencing and returns the
// backend, closed when the test ends.
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
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	addr := srv.Addr()
	exists := func(db int, key string) bool {
		t.Helper()
		c := goredis.NewClient(&goredis.Options{Addr: addr, DB: db})
		defer c.Close()
		n, err := c.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	t.Run("plain", func(t *testing.T) {
		b := openAndUse(t, srv.URL(), "plain")
		if !exists(0, "dsync:{plain}") {
			t.Error("hold not in db 0 under the default prefix")
		}
		if lease.Driver(b).Capabilities().Name != "redis" {
			t.Errorf("driver %q", lease.Driver(b).Capabilities().Name)
		}
	})
	t.Run("db path", func(t *testing.T) {
		openAndUse(t, "redis://"+addr+"/3", "indb3")
		if !exists(3, "dsync:{indb3}") || exists(0, "dsync:{indb3}") {
			t.Error("hold not in db 3 alone")
		}
	})
	t.Run("db option", func(t *testing.T) {
		openAndUse(t, "redis://"+addr+"?db=5", "indb5")
		if !exists(5, "dsync:{indb5}") {
			t.Error("hold not in db 5")
		}
	})
	t.Run("prefix and common and go-redis options", func(t *testing.T) {
		b := openAndUse(t, "redis://"+addr+"/2?prefix=app:&ttl=30s&retry_min=5ms&retry_max=1s&dial_timeout=2s&read_timeout=1s&pool_size=4&max_retries=1",
			"prefixed")
		if !exists(2, "app:{prefixed}") {
			t.Error("hold not under the app: prefix")
		}
		if got := b.Defaults(); got.TTL != 30*time.Second || got.RetryMin != 5*time.Millisecond || got.RetryMax != time.Second {
			t.Errorf("Defaults() = %+v, want the URL's ttl and retry bounds", got)
		}
	})
	t.Run("close", func(t *testing.T) {
		b := openAndUse(t, srv.URL(), "closing")
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := lease.Driver(b).Holder(ctx, "closing"); !errors.Is(err, backends.ErrClosed) {
			t.Errorf("Holder after Close = %v, want ErrClosed", err)
		}
	})
}

func TestOpenURLPassword(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{Password: "s3cret"})
	ctx := testutil.Context(t)

	openAndUse(t, srv.URL(), "withpass")
	openAndUse(t, "redis://:s3cret@"+srv.Addr(), "withpass2")
	openAndUse(t, "redis://default:s3cret@"+srv.Addr()+"/1", "withuser")

	_, err := dsync.Open(ctx, "redis://:wrong-s3cret@"+srv.Addr())
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("error does not name the server %s: %v", srv.Addr(), err)
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		t.Errorf("the server's refusal is not passed through: %v", err)
	}
}

func TestOpenURLInvalid(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:1?bogus=1",           // unknown option: dsync.Open rejects it
		"redis://127.0.0.1:1?idle_timeout=1s",   // go-redis alias we do not list
		"redis://127.0.0.1:1?skip_verify=true",  // rediss only
		"redis://127.0.0.1:1?prefix=a{b",        // breaks the hash tag
		"redis://127.0.0.1:1?prefix=",           // empty
		"redis://127.0.0.1:1/x",                 // bad db
		"redis://127.0.0.1:1/1/2",               // bad path
		"redis://127.0.0.1:1?db=x",              // bad db option
		"redis://127.0.0.1:1?dial_timeout=soon", // go-redis rejects the value
		"redis://127.0.0.1:1?pool_size=many",
		"redis://127.0.0.1:1?ttl=-1s", // common option, checked by the root
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := dsync.Open(ctx, "redis://:s3cret@127.0.0.1:1/0")
	if err == nil {
		t.Fatal("Open of 127.0.0.1:1 succeeded")
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("Open took %v, beyond its 1s context", time.Since(start))
	}
	msg := err.Error()
	if !strings.Contains(msg, "redis at 127.0.0.1:1: unreachable") {
		t.Errorf("error does not name the unreachable address: %v", msg)
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error leaks the password: %v", msg)
	}
	if errors.Is(err, backends.ErrInvalid) {
		t.Errorf("unreachable server reported as an invalid URL: %v", err)
	}
}

// TestWritesNothingToStderr: the driver reports a server it cannot reach
// through errors only. go-redis prints each failed dial through its
// process-wide logger (stderr by default), which is the application's:
// dsync neither changes it nor gives it anything to print, at Open or
// later, for the clients it creates.
func TestWritesNothingToStderr(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	var openErr, downErr, backErr error
	out := testutil.CaptureStderr(t, func() {
		var b *dsync.Backend
		b, openErr = dsync.Open(ctx, "redis://127.0.0.1:1") // nobody listens on port 1
		if openErr == nil {
			_ = b.Close()
		}

		b, err := dsync.Open(ctx, srv.URL())
		if err != nil {
			t.Fatalf("Open(%s): %v", srv.URL(), err)
		}
		defer b.Close()
		d := lease.Driver(b)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		for i := range 30 { // more calls than the pool has connections
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, downErr = d.Acquire(actx, req("stderr", fmt.Sprint("t", i), time.Minute))
			cancel()
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		_, backErr = d.Acquire(ctx, req("stderr", "back", time.Minute))
	})
	if openErr == nil || !strings.Contains(openErr.Error(), "connection refused") {
		t.Errorf("Open of a closed port: %v, want connection refused", openErr)
	}
	var opErr *net.OpError
	if !errors.As(downErr, &opErr) {
		t.Errorf("Acquire on a killed server: %v, want the dial's *net.OpError", downErr)
	}
	if backErr != nil {
		t.Errorf("Acquire after the server came back: %v", backErr)
	}
	if out != "" {
		t.Errorf("written to stderr:\n%s", out)
	}
}

// TestOpenURLMalformed: the URL table every scheme runs, and an empty host,
// which does not mean localhost.
func TestOpenURLMalformed(t *testing.T) {
	for _, scheme := range []string{"redis", "rediss"} {
		t.Run(scheme, func(t *testing.T) {
			backendtest.CheckBadURLs(t, scheme+"://:s3cret@HOST/0",
				backendtest.URLCase{URL: scheme + "://", Text: "no host: want " + scheme + "://host:6379 (an empty host does not mean localhost)"},
				backendtest.URLCase{URL: scheme + ":///0", Text: "no host"},
				backendtest.URLCase{URL: scheme + "://:s3cret@/0", Text: "no host"},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:1,127.0.0.1:2", Text: "a list of hosts"},
				backendtest.URLCase{URL: scheme + "://127.0.0.1:1/0?prefix=a:&prefix=b:", Text: "more than once"},
			)
		})
	}
}

// TestOpenURLIPv6: an IPv6 address in brackets is a host like any other.
func TestOpenURLIPv6(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{ExtraArgs: []string{"--bind", "127.0.0.1", "-::1"}})
	addr := "[::1]:" + srv.Addr()[strings.LastIndex(srv.Addr(), ":")+1:]
	if c, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		_ = c.Close()
	}
	openAndUse(t, "redis://"+addr+"/0", "ipv6")
}
