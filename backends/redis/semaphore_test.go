package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// semReq is a fenced request for one permit of a semaphore of size limit.
func semReq(key, token string, limit int, ttl time.Duration) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: ttl, Limit: limit, Fence: true}
}

// serverMillis is the server's clock (TIME) in ms.
func serverMillis(t *testing.T, ctx context.Context, client *goredis.Client) int64 {
	t.Helper()
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMilli()
}

// score is token's score in the holders of key (its expiry, ms on the
// server's clock), or -1 when token is not there.
func score(t *testing.T, ctx context.Context, client *goredis.Client, key, token string) int64 {
	t.Helper()
	s, err := client.ZScore(ctx, "dsync:{"+key+"}", token).Result()
	if errors.Is(err, goredis.Nil) {
		return -1
	}
	if err != nil {
		t.Fatalf("ZSCORE: %v", err)
	}
	return int64(s)
}

func TestSemAdmitsLimit(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	const limit = 3

	for _, tok := range []string{"a", "b", "c"} {
		g := testutil.MustGrant(t, ctx, d, semReq(key, tok, limit, time.Minute))
		if g.TTL != time.Minute || g.Fence == 0 {
			t.Errorf("Grant = %+v, want TTL 1m, a fence and no key of its own", g)
		}
	}
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "d", limit, time.Minute))
	// Not re-entrant: a token holds one permit at most.
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "a", limit, time.Minute))
	if err := d.Release(ctx, key, "b"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	testutil.MustGrant(t, ctx, d, semReq(key, "d", limit, time.Minute))
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "e", limit, time.Minute))
	if err := d.Release(ctx, key, "b"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("double Release = %v, want ErrNotHeld", err)
	}
	// Without fencing: no token, same admission.
	r := semReq(key, "e", limit, time.Minute)
	r.Fence = false
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	g, err := d.Acquire(ctx, r)
	if err != nil || g.Fence != 0 {
		t.Errorf("unfenced Acquire = %+v, %v; want a grant without a fence", g, err)
	}
}

// TestSemServerClock: a holder's score is its expiry on the server's
// clock, whatever the client's.
func TestSemServerClock(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	const ttl = 30 * time.Second

	before := serverMillis(t, ctx, client)
	testutil.MustGrant(t, ctx, d, semReq(key, "a", 2, ttl+500*time.Microsecond))
	after := serverMillis(t, ctx, client)
	s := score(t, ctx, client, key, "a")
	if s < before+ttl.Milliseconds() || s > after+ttl.Milliseconds() {
		t.Errorf("score %d outside [%d, %d]: not TIME + ttl (truncated to ms)", s, before+ttl.Milliseconds(), after+ttl.Milliseconds())
	}
	// The set itself expires with its latest holder.
	if exp := client.PExpireTime(ctx, "dsync:{"+key+"}").Val(); exp.Milliseconds() != s {
		t.Errorf("PEXPIRETIME of the set = %v, want the holder's score %d", exp.Milliseconds(), s)
	}
}

func TestSemExpiryFrees(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	testutil.MustGrant(t, ctx, d, semReq(key, "short", 2, 100*time.Millisecond))
	testutil.MustGrant(t, ctx, d, semReq(key, "long", 2, time.Minute))
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "c", 2, time.Minute))
	var err error
	testutil.Eventually(t, 5*time.Second, "the 100ms permit to free its slot", func() bool {
		_, err = d.Acquire(ctx, semReq(key, "c", 2, time.Minute))
		return !errors.Is(err, backends.ErrNotAcquired)
	})
	if err != nil {
		t.Fatalf("Acquire once the short permit expired: %v", err)
	}
	if s := score(t, ctx, client, key, "short"); s != -1 {
		t.Errorf("expired holder still in the set (score %d): not pruned", s)
	}
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "d", 2, time.Minute))
}

func TestSemRefresh(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	hold := "dsync:{" + key + "}"

	// A short permit kept alive by refreshes outlives its TTL many times.
	testutil.MustGrant(t, ctx, d, semReq(key, "a", 2, 150*time.Millisecond))
	testutil.MustGrant(t, ctx, d, semReq(key, "b", 2, time.Minute))
	start := time.Now()
	for time.Since(start) < 600*time.Millisecond {
		if err := d.Refresh(ctx, key, "a", 150*time.Millisecond); err != nil {
			t.Fatalf("Refresh after %v: %v", time.Since(start), err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "c", 2, time.Minute))

	// Refresh sets now + ttl on the server's clock, and the set's expiry
	// follows its latest holder up and down.
	before := serverMillis(t, ctx, client)
	if err := d.Refresh(ctx, key, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	s := score(t, ctx, client, key, "a")
	if s < before+time.Hour.Milliseconds() || s > serverMillis(t, ctx, client)+time.Hour.Milliseconds() {
		t.Errorf("score after Refresh(1h) = %d, want TIME + 1h (TIME was %d)", s, before)
	}
	if exp := client.PExpireTime(ctx, hold).Val().Milliseconds(); exp != s {
		t.Errorf("PEXPIRETIME after Refresh(1h) = %d, want %d", exp, s)
	}
	if err := d.Refresh(ctx, key, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if exp, sb := client.PExpireTime(ctx, hold).Val().Milliseconds(), score(t, ctx, client, key, "b"); exp != sb {
		t.Errorf("PEXPIRETIME after the latest holder shortened = %d, want b's score %d", exp, sb)
	}

	// An expired permit is never re-created, and the others stay as they
	// were.
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, d, semReq(key, "x", 2, 50*time.Millisecond))
	testutil.Eventually(t, 5*time.Second, "the 50ms permit to expire", func() bool {
		return serverMillis(t, ctx, client) > score(t, ctx, client, key, "x")
	})
	sb := score(t, ctx, client, key, "b")
	if err := d.Refresh(ctx, key, "x", time.Hour); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh after expiry = %v, want ErrNotHeld", err)
	}
	if s := score(t, ctx, client, key, "x"); s != -1 {
		t.Errorf("Refresh re-created the expired permit (score %d)", s)
	}
	if s := score(t, ctx, client, key, "b"); s != sb {
		t.Errorf("b's score went from %d to %d on another token's Refresh", sb, s)
	}
}

// TestSemNotHeld: Release and Refresh of a token that never held, or whose
// permit expired, are ErrNotHeld and touch no other holder.
func TestSemNotHeld(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	testutil.MustGrant(t, ctx, d, semReq(key, "a", 3, time.Minute))
	testutil.MustGrant(t, ctx, d, semReq(key, "b", 3, time.Minute))
	testutil.MustGrant(t, ctx, d, semReq(key, "gone", 3, 30*time.Millisecond))
	testutil.Eventually(t, 5*time.Second, "the 30ms permit to expire", func() bool {
		return serverMillis(t, ctx, client) > score(t, ctx, client, key, "gone")
	})
	sa, sb := score(t, ctx, client, key, "a"), score(t, ctx, client, key, "b")
	for _, tok := range []string{"nobody", "gone", "a\x00", "A"} {
		if err := d.Release(ctx, key, tok); !errors.Is(err, backends.ErrNotHeld) {
			t.Errorf("Release(%q) = %v, want ErrNotHeld", tok, err)
		}
		if err := d.Refresh(ctx, key, tok, time.Hour); !errors.Is(err, backends.ErrNotHeld) {
			t.Errorf("Refresh(%q) = %v, want ErrNotHeld", tok, err)
		}
	}
	if a, b := score(t, ctx, client, key, "a"), score(t, ctx, client, key, "b"); a != sa || b != sb {
		t.Errorf("scores went from %d, %d to %d, %d on other tokens' calls", sa, sb, a, b)
	}
	if n := client.ZCard(ctx, "dsync:{"+key+"}").Val(); n != 3 {
		t.Errorf("ZCARD = %d, want 3 (a, b and the size)", n)
	}
	// The empty member that keeps the size is no token.
	if err := d.Release(ctx, key, ""); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf(`Release("") = %v, want ErrInvalid`, err)
	}
	// Nor does anything happen on a key nobody holds.
	if err := d.Release(ctx, key+"-free", "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Release on a free key = %v, want ErrNotHeld", err)
	}
}

func TestSemLimitMismatch(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	wantMismatch := func(r backends.Request, holders int) {
		t.Helper()
		_, err := d.Acquire(ctx, r)
		want := backends.LimitMismatch(key, max(r.Limit, 1), holders)
		if !errors.Is(err, backends.ErrInvalid) || err.Error() != want.Error() {
			t.Errorf("Acquire(limit %d, fence %v) = %v, want %v", r.Limit, r.Fence, err, want)
		}
	}
	// A semaphore of 3 refuses other sizes, and locks, fenced or not, even
	// with a slot free.
	testutil.MustGrant(t, ctx, d, semReq(key, "a", 3, time.Minute))
	wantMismatch(semReq(key, "b", 2, time.Minute), 3)
	wantMismatch(semReq(key, "b", 4, time.Minute), 3)
	wantMismatch(req(key, "b", time.Minute), 3)
	unfenced := backends.Request{Key: key, Token: "b", TTL: time.Minute}
	wantMismatch(unfenced, 3)
	unfenced.Limit = 1
	wantMismatch(unfenced, 3)

	// Once nobody holds it, the key takes any size; a lock refuses
	// semaphores.
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, d, req(key, "lock", time.Minute))
	wantMismatch(semReq(key, "b", 2, time.Minute), 1)
	r := semReq(key, "b", 5, time.Minute)
	r.Fence = false
	wantMismatch(r, 1)
	if err := d.Release(ctx, key, "lock"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, d, semReq(key, "b", 2, time.Minute))
	wantMismatch(semReq(key, "c", 3, time.Minute), 2)
}

// TestSemSizeChangesAfterExpiry: the size of expired holders binds nobody.
func TestSemSizeChangesAfterExpiry(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	testutil.MustGrant(t, ctx, d, semReq(key, "a", 3, 30*time.Millisecond))
	testutil.Eventually(t, 5*time.Second, "the 30ms permit to expire", func() bool {
		return serverMillis(t, ctx, client) > score(t, ctx, client, key, "a")
	})
	testutil.MustGrant(t, ctx, d, semReq(key, "b", 2, time.Minute))
	testutil.MustGrant(t, ctx, d, semReq(key, "c", 2, time.Minute))
	testutil.WantNotAcquired(t, ctx, d, semReq(key, "d", 2, time.Minute))
}

func TestSemFencesStrictlyIncrease(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	var last uint64
	check := func(g backends.Grant) {
		t.Helper()
		if g.Fence <= last {
			t.Fatalf("fence %d after %d: not strictly increasing", g.Fence, last)
		}
		last = g.Fence
	}
	for i := range 10 {
		a, b := fmt.Sprint("a", i), fmt.Sprint("b", i)
		check(testutil.MustGrant(t, ctx, d, semReq(key, a, 4, time.Minute)))
		check(testutil.MustGrant(t, ctx, d, semReq(key, b, 4, time.Minute)))
		for _, tok := range []string{a, b} {
			if err := d.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
		}
		// A lock on the same key between two semaphores draws from the
		// same counter.
		lock := fmt.Sprint("lock", i)
		check(testutil.MustGrant(t, ctx, d, req(key, lock, time.Minute)))
		if err := d.Release(ctx, key, lock); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemHolder(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	values := "dsync:{" + key + "}:values"

	if _, err := d.Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a free key = %v, want ErrNotHeld", err)
	}
	holder := func(wantValue string, wantTTL time.Duration) {
		t.Helper()
		info, err := d.Holder(ctx, key)
		if err != nil {
			t.Fatalf("Holder: %v", err)
		}
		if !bytes.Equal(info.Value, []byte(wantValue)) || (wantValue == "" && info.Value != nil) {
			t.Errorf("Holder().Value = %q, want %q", info.Value, wantValue)
		}
		if info.TTL > wantTTL || info.TTL < wantTTL-5*time.Second {
			t.Errorf("Holder().TTL = %v, want about %v", info.TTL, wantTTL)
		}
	}
	// Without values, nothing but the set is written.
	testutil.MustGrant(t, ctx, d, semReq(key, "plain", 4, 20*time.Second))
	if n := client.Exists(ctx, values).Val(); n != 0 {
		t.Errorf("values hash written for a holder without a value")
	}
	holder("", 20*time.Second)

	va := []byte("candidate-a\nwith a newline and \x00 bytes")
	r := semReq(key, "a", 4, 10*time.Second)
	r.Value = va
	testutil.MustGrant(t, ctx, d, r)
	holder("", 20*time.Second) // "plain" still expires last
	if err := d.Refresh(ctx, key, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	holder(string(va), time.Minute)
	r = semReq(key, "c", 4, 30*time.Second)
	r.Value = []byte("vc")
	testutil.MustGrant(t, ctx, d, r)
	holder(string(va), time.Minute)
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	holder("vc", 30*time.Second)
	if v := client.HGet(ctx, values, "a").Val(); v != "" {
		t.Errorf("released holder's value still stored: %q", v)
	}
	if ttl := client.PTTL(ctx, values).Val(); ttl <= 25*time.Second || ttl > 30*time.Second {
		t.Errorf("PTTL of the values hash = %v, want the latest holder's (30s)", ttl)
	}
	for _, tok := range []string{"c", "plain"} {
		if err := d.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Holder after the last Release = %v, want ErrNotHeld", err)
	}
}

// TestSemVanishes: the set and its values go with the last holder, by
// release or by expiry; only the fence counter stays, as for a lock.
func TestSemVanishes(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, &redis.Options{Prefix: "app:"})
	ctx := testutil.Context(t)

	// The keys of key, and its hash slot's fence counter when it exists.
	keysOf := func(key string) []string {
		t.Helper()
		keys, err := client.Keys(ctx, "app:{"+key+"}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if fence := redisnode.FenceKey("app:", key); client.Exists(ctx, fence).Val() == 1 {
			keys = append(keys, fence)
		}
		return keys
	}
	for _, byExpiry := range []bool{false, true} {
		key := fmt.Sprint("sem-", byExpiry)
		ttl := time.Minute
		if byExpiry {
			ttl = 80 * time.Millisecond
		}
		for i, tok := range []string{"a", "b", "c"} {
			r := semReq(key, tok, 3, ttl+time.Duration(i)*20*time.Millisecond)
			if tok != "b" {
				r.Value = []byte("v-" + tok)
			}
			testutil.MustGrant(t, ctx, d, r)
		}
		if got := len(keysOf(key)); got != 3 {
			t.Errorf("%s: %q, want the set, its values and the fence counter", key, keysOf(key))
		}
		if byExpiry {
			testutil.Eventually(t, 5*time.Second, "the permits to expire", func() bool { return len(keysOf(key)) == 1 })
		} else {
			for _, tok := range []string{"c", "a", "b"} {
				if err := d.Release(ctx, key, tok); err != nil {
					t.Fatal(err)
				}
			}
		}
		if keys := keysOf(key); len(keys) != 1 || keys[0] != redisnode.FenceKey("app:", key) {
			t.Errorf("%s: keys left = %q, want only the fence counter", key, keys)
		}
	}
}

// TestSemLayout pins the documented layout of a semaphore.
func TestSemLayout(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, &redis.Options{Prefix: "app:"})
	ctx := testutil.Context(t)

	r := semReq("job", "tok", 5, time.Minute)
	r.Value = []byte("v")
	testutil.MustGrant(t, ctx, d, r)
	testutil.MustGrant(t, ctx, d, semReq("job", "tok2", 5, time.Minute))
	zs, err := client.ZRangeWithScores(ctx, "app:{job}", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 3 || zs[0].Member != "" || zs[0].Score != -5 {
		t.Fatalf("ZRANGE app:{job} = %v, want the size as member \"\" scored -5, then the holders", zs)
	}
	if m := client.HGetAll(ctx, "app:{job}:values").Val(); len(m) != 1 || m["tok"] != "v" {
		t.Errorf("HGETALL app:{job}:values = %v, want tok: v", m)
	}
}

// TestSemReleaseWakes: a semaphore's release notice goes out on the same
// channel as a lock's; a withdrawal (the "0" flag) sends none.
func TestSemReleaseWakes(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	other, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	sub := watch(ctx, t, d, client, key)
	testutil.MustGrant(t, ctx, other, semReq(key, "a", 2, time.Minute))
	testutil.MustGrant(t, ctx, other, semReq(key, "b", 2, time.Minute))
	if !empty(sub) {
		t.Fatal("notice before any release")
	}
	if err := other.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	receive(t, sub, "a semaphore release")

	// Withdraw must publish nothing: a marker published after it is the
	// first message a raw subscriber sees.
	channel := "dsync:{" + key + "}:released"
	raw := client.Subscribe(ctx, channel)
	t.Cleanup(func() { _ = raw.Close() })
	if _, err := raw.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	node, err := redisnode.New(client, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Release(ctx, redisnode.Target{Key: key}, "b", false); err != nil {
		t.Fatalf("Withdraw: %v", err)
	}
	if err := client.Publish(ctx, channel, "marker").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := raw.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "marker" {
		t.Errorf("first message after Withdraw = %v, %v; want the marker", msg, err)
	}
}

// TestSemHammer: goroutines on several drivers contend for a semaphore;
// the number inside the critical section, counted here, never exceeds the
// limit, and reaches it.
func TestSemHammer(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	const limit, clients, workers, rounds = 3, 3, 12, 25

	ds := make([]*redis.Driver, clients)
	for i := range ds {
		ds[i], _ = newDriver(t, srv, nil)
	}
	var inside, most atomic.Int64
	var fences sync.Map
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := ds[w%clients]
			for i := range rounds {
				tok := fmt.Sprintf("w%d-%d", w, i)
				var g backends.Grant
				var err error
				for {
					g, err = d.Acquire(ctx, semReq(key, tok, limit, 10*time.Second))
					if !errors.Is(err, backends.ErrNotAcquired) {
						break
					}
					time.Sleep(200 * time.Microsecond)
				}
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if _, dup := fences.LoadOrStore(g.Fence, tok); dup {
					t.Errorf("fence %d granted twice", g.Fence)
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := d.Release(ctx, key, tok); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > limit || m < limit {
		t.Errorf("at most %d holders at once, want exactly the limit %d reached and never passed", m, limit)
	}
	t.Logf("%d workers on %d clients, %d rounds each: at most %d holders at once (limit %d)", workers, clients, rounds, most.Load(), limit)
}

// TestSemNoScriptFallback: the semaphore scripts survive an emptied script
// cache, as the lock's do.
func TestSemNoScriptFallback(t *testing.T) {
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
	testutil.MustGrant(t, ctx, d, semReq(key, "warm", 2, time.Minute))
	flush()
	testutil.MustGrant(t, ctx, d, semReq(key, "a", 2, time.Minute))
	refreshHolderReleaseAfterFlushes(ctx, t, d, key, "a", flush)
}

// TestSemLargeScores: scores are whole milliseconds even for TTLs far
// beyond any real use (Lua numbers print with 14 digits).
func TestSemLargeScores(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	ttl := time.Duration(math.MaxInt64).Truncate(time.Millisecond)
	before := serverMillis(t, ctx, client)
	testutil.MustGrant(t, ctx, d, semReq(key, "a", 2, ttl))
	if s := score(t, ctx, client, key, "a"); s < before+ttl.Milliseconds() || s > before+ttl.Milliseconds()+5000 {
		t.Errorf("score %d for a TTL of %d ms from %d", s, ttl.Milliseconds(), before)
	}
	if err := d.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
}
