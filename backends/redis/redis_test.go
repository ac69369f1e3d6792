package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// newDriver returns a driver over a fresh client of srv; both are closed
// when the test ends (the driver first).
func newDriver(t *testing.T, srv *redistest.Server, opts *redis.Options) (*redis.Driver, *goredis.Client) {
	t.Helper()
	client := srv.NewClient(t)
	d, err := redis.NewDriver(client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, client
}

func req(key, token string, ttl time.Duration) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: ttl, Fence: true}
}

func TestNewNilClient(t *testing.T) {
	_, err := redis.NewDriver(nil, nil)
	var ie *backends.InvalidError
	if !errors.As(err, &ie) || ie.Field != "client" {
		t.Fatalf("New(nil) = %v, want *InvalidError for client", err)
	}
}

// TestNewRefusesRing: a Ring client is refused before any I/O, with an
// error that says why.
func TestNewRefusesRing(t *testing.T) {
	srv := redistest.Start(t, nil)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	defer ring.Close()
	d, err := redis.NewDriver(ring, nil)
	if err == nil {
		_ = d.Close()
		t.Fatal("New accepted a *goredis.Ring")
	}
	var ie *backends.InvalidError
	if !errors.As(err, &ie) || ie.Field != "client" || !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("New(ring) = %v, want an *InvalidError for client", err)
	}
	if !strings.Contains(err.Error(), "Ring") || !strings.Contains(err.Error(), "shard") {
		t.Errorf("the error does not say what is wrong with a Ring: %v", err)
	}
}

func TestNewBadPrefix(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, p := range []string{"a{", "}", "x{y}"} {
		_, err := redis.NewDriver(client, &redis.Options{Prefix: p})
		var ie *backends.InvalidError
		if !errors.As(err, &ie) || ie.Field != "prefix" {
			t.Errorf("New with prefix %q = %v, want *InvalidError for prefix", p, err)
		}
	}
}

// TestInvalidBeforeIO runs against a port nobody listens on: every bad
// argument must be reported as such, not as a dial error.
func TestInvalidBeforeIO(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer client.Close()
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	ok := req("k", "tok", time.Second)
	for name, r := range map[string]backends.Request{
		"empty key":     {Token: "t", TTL: time.Second},
		"empty token":   {Key: "k", TTL: time.Second},
		"newline token": {Key: "k", Token: "a\nb", TTL: time.Second},
		"zero ttl":      {Key: "k", Token: "t"},
		"sub-ms ttl":    {Key: "k", Token: "t", TTL: time.Microsecond},
	} {
		if _, err := d.Acquire(ctx, r); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Acquire(%s) = %v, want ErrInvalid", name, err)
		}
	}
	for _, limit := range []int{-1, 1<<12 + 1} {
		if _, err := d.Acquire(ctx, backends.Request{Key: "k", Token: "t", TTL: time.Second, Limit: limit}); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Acquire(limit %d) = %v, want ErrInvalid", limit, err)
		}
	}
	checks := map[string]error{
		"Refresh empty key":     d.Refresh(ctx, "", ok.Token, time.Second),
		"Refresh empty token":   d.Refresh(ctx, ok.Key, "", time.Second),
		"Refresh newline token": d.Refresh(ctx, ok.Key, "a\n", time.Second),
		"Refresh zero ttl":      d.Refresh(ctx, ok.Key, ok.Token, 0),
		"Release empty key":     d.Release(ctx, "", ok.Token),
		"Release empty token":   d.Release(ctx, ok.Key, ""),
		"Release newline token": d.Release(ctx, ok.Key, "tok\nvalue"),
	}
	_, checks["Holder empty key"] = d.Holder(ctx, "")
	_, checks["WatchReleases empty key"] = d.WatchReleases(ctx, "")
	for name, err := range checks {
		if !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	// A valid call does reach the network, and passes its error through.
	if _, err := d.Acquire(ctx, ok); err == nil || errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrNotAcquired) {
		t.Errorf("Acquire on an unreachable server = %v, want the client's error", err)
	}
}

func TestCapabilities(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := backends.Capabilities{Name: "redis", MaxLimit: 1 << 12, Fencing: true, TTLResolution: time.Millisecond, ReleaseNotices: true, Order: backends.BoundedBarging}
	if got := d.Capabilities(); got != want {
		t.Errorf("Capabilities() = %+v, want %+v", got, want)
	}
}

func TestAcquireRelease(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	g, err := d.Acquire(ctx, req(key, "a", 10*time.Second))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if g.TTL != 10*time.Second || g.Fence == 0 {
		t.Errorf("Grant = %+v, want TTL 10s and a fence", g)
	}
	if _, err := d.Acquire(ctx, req(key, "b", 10*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("second Acquire = %v, want ErrNotAcquired", err)
	}
	// Not re-entrant either.
	if _, err := d.Acquire(ctx, req(key, "a", 10*time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("Acquire by the holder = %v, want ErrNotAcquired", err)
	}
	if err := d.Release(ctx, key, "b"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release by another token = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, key); err != nil {
		t.Fatalf("hold gone after a foreign Release: %v", err)
	}
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := d.Release(ctx, key, "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("double Release = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder after Release = %v, want ErrNotHeld", err)
	}
	if _, err := d.Acquire(ctx, req(key, "b", 10*time.Second)); err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	// A stale owner's Release leaves the newer hold alone.
	if err := d.Release(ctx, key, "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("stale Release = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, key); err != nil {
		t.Fatalf("newer hold gone after a stale Release: %v", err)
	}
}

func TestGrantTTLTruncatedToMillis(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	g, err := d.Acquire(testutil.Context(t), req(t.Name(), "a", 1500*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != time.Millisecond {
		t.Errorf("Grant.TTL = %v for a 1.5ms request, want the 1ms the server applied", g.TTL)
	}
}

func TestRefresh(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	hold := "dsync:{" + key + "}"

	if _, err := d.Acquire(ctx, req(key, "a", time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, key, "a", time.Hour); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if pttl := client.PTTL(ctx, hold).Val(); pttl < 59*time.Minute {
		t.Errorf("PTTL after Refresh(1h) = %v", pttl)
	}
	if err := d.Refresh(ctx, key, "b", time.Hour); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh by another token = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, key, "a", time.Hour); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh after Release = %v, want ErrNotHeld", err)
	}

	// A hold that expired is never re-created by Refresh.
	if _, err := d.Acquire(ctx, req(key, "c", 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the 50ms hold to expire", func() bool {
		return client.Exists(ctx, hold).Val() == 0
	})
	if err := d.Refresh(ctx, key, "c", time.Hour); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh after expiry = %v, want ErrNotHeld", err)
	}
	if n := client.Exists(ctx, hold).Val(); n != 0 {
		t.Errorf("Refresh re-created the expired hold (EXISTS = %d)", n)
	}
	if _, err := d.Acquire(ctx, req(key, "d", time.Second)); err != nil {
		t.Errorf("Acquire after expiry: %v", err)
	}
}

// TestFencesStrictlyIncrease: a key's tokens grow with every fenced hold;
// a missing counter starts at the server's clock in microseconds, and keys
// of one hash slot share theirs, so a restart that loses the counters, or
// holds of other keys, never take a key's tokens back.
func TestFencesStrictlyIncrease(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	serverMicros := func() uint64 {
		t.Helper()
		now, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return uint64(now.UnixMicro())
	}
	var last uint64
	acquire := func(key string, fence bool) uint64 {
		t.Helper()
		r := req(key, "tok", time.Second)
		r.Fence = fence
		g, err := d.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, key, "tok"); err != nil {
			t.Fatal(err)
		}
		if !fence {
			if g.Fence != 0 {
				t.Errorf("Grant.Fence = %d without Request.Fence, want 0", g.Fence)
			}
			return 0
		}
		if g.Fence <= last {
			t.Fatalf("%s: fence %d after %d: not strictly increasing", key, g.Fence, last)
		}
		last = g.Fence
		return g.Fence
	}
	before := serverMicros()
	first := acquire(key, true)
	if after := serverMicros(); first < before || first > after+1 {
		t.Errorf("first fence %d, want the server's clock in µs (between %d and %d)", first, before, after+1)
	}
	for i := range 20 {
		acquire(key, i%5 != 4) // a hold without fencing still comes between
	}
	// A key of the same hash slot draws from the same counter; the next
	// fence of key is still larger.
	same, other := "", ""
	for i := 0; same == "" || other == ""; i++ {
		k := fmt.Sprint("k", i)
		if redisnode.FenceKey("", k) == redisnode.FenceKey("", key) {
			same = k
		} else {
			other = k
		}
	}
	acquire(same, true)
	acquire(key, true)
	// A key of another slot starts its own counter at the clock.
	last = 0
	before = serverMicros()
	if f := acquire(other, true); f < before {
		t.Errorf("first fence of another slot's counter = %d, want at least the clock's %d", f, before)
	}

	// A restart without persistence loses every counter; the next fence
	// restarts at the clock, above the ones before.
	last = 0
	acquire(key, true)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the server to answer after its restart", func() bool { return client.Ping(ctx).Err() == nil })
	acquire(key, true)
}

func TestHolder(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)

	value := []byte("candidate-7\nwith a newline and \x00 bytes")
	r := req(t.Name(), "tok", 30*time.Second)
	r.Value = value
	if _, err := d.Acquire(ctx, r); err != nil {
		t.Fatal(err)
	}
	info, err := d.Holder(ctx, r.Key)
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	if !bytes.Equal(info.Value, value) {
		t.Errorf("Holder().Value = %q, want %q", info.Value, value)
	}
	if info.TTL <= 0 || info.TTL > 30*time.Second {
		t.Errorf("Holder().TTL = %v, want in (0, 30s]", info.TTL)
	}
	// The value is not part of the token: ownership checks still pass.
	if err := d.Refresh(ctx, r.Key, "tok", time.Minute); err != nil {
		t.Errorf("Refresh of a hold with a value: %v", err)
	}
	if err := d.Release(ctx, r.Key, "tok\ncandidate-7"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Release with token+value = %v, want ErrInvalid", err)
	}
	if err := d.Release(ctx, r.Key, "to"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Release with a prefix of the token = %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, r.Key, "tok"); err != nil {
		t.Errorf("Release of a hold with a value: %v", err)
	}

	// Without a value.
	r2 := req(t.Name()+"-novalue", "tok2", time.Second)
	if _, err := d.Acquire(ctx, r2); err != nil {
		t.Fatal(err)
	}
	info, err = d.Holder(ctx, r2.Key)
	if err != nil || len(info.Value) != 0 {
		t.Errorf("Holder() = %+v, %v, want an empty value", info, err)
	}
	if _, err := d.Holder(ctx, t.Name()+"-nobody"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Holder of a free key = %v, want ErrNotHeld", err)
	}
}

// TestLayout pins the documented storage layout: the hold P{K}, the fence
// counter of K's hash slot P fence:{T}, and nothing else.
func TestLayout(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, &redis.Options{Prefix: "app:"})
	ctx := testutil.Context(t)

	r := req("job", "tok", time.Minute)
	r.Value = []byte("v")
	g, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	fence := redisnode.FenceKey("app:", "job")
	if !strings.HasPrefix(fence, "app:fence:{") {
		t.Errorf("FenceKey = %q, want app:fence:{...}", fence)
	}
	if want := []string{fence, "app:{job}"}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("KEYS * = %q, want %q", keys, want)
	}
	if v, want := client.Get(ctx, "app:{job}").Val(), fmt.Sprintf("tok\t%d\nv", g.Fence); v != want {
		t.Errorf("GET app:{job} = %q, want %q (token, fence, value)", v, want)
	}
	if n, _ := client.Get(ctx, fence).Uint64(); n != g.Fence {
		t.Errorf("GET %s = %d, want the grant's fence %d", fence, n, g.Fence)
	}
	if ttl := client.PTTL(ctx, fence).Val(); ttl != -1 {
		t.Errorf("PTTL of the fence counter = %v, want none (-1)", ttl)
	}
	if err := d.Release(ctx, "job", "tok"); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, "app:{job}").Val(); n != 0 {
		t.Errorf("hold still exists after Release")
	}
	if n := client.Exists(ctx, fence).Val(); n != 1 {
		t.Errorf("fence counter gone after Release")
	}
	// Without fencing, no counter is written.
	if _, err := d.Acquire(ctx, backends.Request{Key: "nofence", Token: "t", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if keys := client.Keys(ctx, "*").Val(); len(keys) != 2 {
		t.Errorf("KEYS * = %q after a hold without Fence, want its hold and the one counter", keys)
	}
}

// TestNoScriptFallback empties the server's script cache, as a restart
// does: every script must still run (EVALSHA falls back to EVAL).
func TestNoScriptFallback(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	flush := func() {
		t.Helper()
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Warm the cache first, so that the flush really removes something.
	if _, err := d.Acquire(ctx, req(key, "warm", time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, key, "warm"); err != nil {
		t.Fatal(err)
	}

	flush()
	if _, err := d.Acquire(ctx, req(key, "a", time.Minute)); err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH: %v", err)
	}
	refreshHolderReleaseAfterFlushes(ctx, t, d, key, "a", flush)
}

// refreshHolderReleaseAfterFlushes refreshes, reads and releases token's
// hold on key, each after a call of flush (SCRIPT FLUSH): every script
// must be loaded again.
func refreshHolderReleaseAfterFlushes(ctx context.Context, t *testing.T, d *redis.Driver, key, token string, flush func()) {
	t.Helper()
	flush()
	if err := d.Refresh(ctx, key, token, time.Minute); err != nil {
		t.Fatalf("Refresh after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, err := d.Holder(ctx, key); err != nil {
		t.Fatalf("Holder after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := d.Release(ctx, key, token); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

func TestClose(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	if _, err := d.Acquire(ctx, req(key, "a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	sub, err := d.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	sub.Close() // after the driver: must not block or panic

	if _, err := d.Acquire(ctx, req(key, "b", time.Minute)); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := d.Refresh(ctx, key, "a", time.Minute); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Refresh after Close = %v, want ErrClosed", err)
	}
	if err := d.Release(ctx, key, "a"); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if _, err := d.Holder(ctx, key); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Holder after Close = %v, want ErrClosed", err)
	}
	if _, err := d.WatchReleases(ctx, key); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("WatchReleases after Close = %v, want ErrClosed", err)
	}
	// The hold is left to expire, and the application's client stays open.
	if n, err := client.Exists(ctx, "dsync:{"+key+"}").Result(); err != nil || n != 1 {
		t.Errorf("after Close: EXISTS = %d, %v; want the hold kept and the client open", n, err)
	}
}

// TestContextBoundsCalls pauses the server: a call must give up when its
// context ends, with an error that is neither a verdict on the lock nor
// invalid input.
func TestContextBoundsCalls(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	if _, err := d.Acquire(ctx, req(key, "warm", time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := d.Acquire(short, req(key, "a", time.Second))
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Acquire on a paused server took %v with a 200ms context", elapsed)
	}
	if err == nil || errors.Is(err, backends.ErrNotAcquired) || errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Acquire on a paused server = %v, want the client's timeout error", err)
	}
	t.Logf("Acquire on a paused server: %v", err)
}

// TestClusterKeyStartingWithBrace: on Cluster, a key starting with "}"
// would make an empty hash tag and scatter a lock's Redis keys across
// slots; the driver refuses it before any I/O (no cluster is running here).
func TestClusterKeyStartingWithBrace(t *testing.T) {
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer client.Close()
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Acquire(context.Background(), req("}x", "t", time.Second)); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Acquire(\"}x\") on Cluster = %v, want ErrInvalid", err)
	}
	if _, err := d.Holder(context.Background(), "}x"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Holder(\"}x\") on Cluster = %v, want ErrInvalid", err)
	}
}

// TestKeyStartingWithBrace: on a single server any key works, "}" first
// included.
func TestKeyStartingWithBrace(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	for _, key := range []string{"}x", "{y}", "a}b{c", "with space", "ünï"} {
		if _, err := d.Acquire(ctx, req(key, "t", time.Minute)); err != nil {
			t.Errorf("Acquire(%q): %v", key, err)
		}
		if err := d.Release(ctx, key, "t"); err != nil {
			t.Errorf("Release(%q): %v", key, err)
		}
	}
}

// TestForeignKeyType: a key of the prefix that holds data of another type
// (a hash someone wrote there) is neither taken nor touched: every call
// answers that it is not ours, without an error of the server's.
func TestForeignKeyType(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	if err := client.HSet(ctx, "dsync:{foreign}", "field", "tok").Err(); err != nil {
		t.Fatal(err)
	}
	for _, fence := range []bool{false, true} {
		r := req("foreign", "tok", time.Minute)
		r.Fence = fence
		if _, err := d.Acquire(ctx, r); !errors.Is(err, backends.ErrNotAcquired) {
			t.Errorf("Acquire (fence %v) of a hash: %v, want ErrNotAcquired", fence, err)
		}
	}
	if err := d.Refresh(ctx, "foreign", "tok", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh of a hash: %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, "foreign", "tok"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Release of a hash: %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, "foreign"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Holder of a hash: %v, want ErrNotHeld", err)
	}
	if v, err := client.HGet(ctx, "dsync:{foreign}", "field").Result(); err != nil || v != "tok" || client.PTTL(ctx, "dsync:{foreign}").Val() != -1 {
		t.Errorf("the hash after the calls: %q, %v, PTTL %v; want it untouched", v, err, client.PTTL(ctx, "dsync:{foreign}").Val())
	}
}
