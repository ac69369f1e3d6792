package redlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/redlock"
)

// The semaphore tests drive the driver through the SPI (the semaphore
// package's conformance checks run in TestConformance), on 5 masters of
// their own, so that they can count what each node holds.

func semReq(key string, limit int, ttl time.Duration) backends.Request {
	return backends.Request{Key: key, Token: rand.Text(), TTL: ttl, Limit: limit, Fence: true}
}

func semCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// permit is a grant with what it takes to release it, where it is, and
// who granted it.
type permit struct {
	backends.Grant
	key, token string
	slot       int
	voters     []int
}

func mustPermit(t *testing.T, ctx context.Context, d *redlock.Driver, r backends.Request) permit {
	t.Helper()
	g, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("Acquire(%q, limit %d): %v", r.Key, r.Limit, err)
	}
	slot, ok := redlock.SlotOf(d, r.Key, r.Token)
	if !ok {
		t.Fatalf("the driver knows no slot of a permit of %q", r.Key)
	}
	return permit{g, r.Key, r.Token, slot, redlock.Voters(r.Key, r.Token)}
}

func (p permit) release(t *testing.T, ctx context.Context, d *redlock.Driver) {
	t.Helper()
	if err := d.Release(ctx, p.key, p.token); err != nil {
		t.Fatalf("Release(%q, slot %d): %v", p.key, p.slot, err)
	}
}

func wantRefused(t *testing.T, ctx context.Context, d *redlock.Driver, r backends.Request) {
	t.Helper()
	_, err := d.Acquire(ctx, r)
	if err == nil {
		slot, _ := redlock.SlotOf(d, r.Key, r.Token)
		t.Fatalf("Acquire on a full semaphore %q won slot %d", r.Key, slot)
	}
	if !errors.Is(err, backends.ErrNotAcquired) || errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("Acquire on a full semaphore: %v, want plain ErrNotAcquired", err)
	}
}

// traces lists, per node, the keys whose value contains token: what an
// attempt left behind.
func traces(t *testing.T, clients []*goredis.Client, token string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	for i, c := range clients {
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("KEYS on node %d: %v", i, err)
		}
		for _, k := range keys {
			if c.Type(ctx, k).Val() != "string" {
				continue
			}
			if strings.Contains(c.Get(ctx, k).Val(), token) {
				out = append(out, fmt.Sprintf("node %d: %s", i, k))
			}
		}
	}
	return out
}

// withdrawnBy polls traces of token until none is left or deadline
// passes, and returns what is left. A round decided without some nodes'
// replies withdraws them when they land, after Acquire has returned; set
// deadline before the attempt's TTL ends, so that only a withdrawal can
// clear a trace in time, not its expiry.
func withdrawnBy(t *testing.T, clients []*goredis.Client, token string, deadline time.Time) []string {
	t.Helper()
	for {
		left := traces(t, clients, token)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond) // polls the nodes: a condition, bounded by deadline
	}
}

// TestSemaphoreAdmitsExactlyN: N permits from different clients, each on a
// slot of its own, with fencing tokens that grow over all of them; the next
// attempt is refused and leaves nothing on any node; a release frees
// exactly one slot.
func TestSemaphoreAdmitsExactlyN(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	clients := nodeClients(t, servers)
	url := redlockURL(servers, faultQuery(""))
	ctx := semCtx(t)
	const key, size = "sem-admits", 4
	var drivers []*redlock.Driver
	for range size + 1 {
		_, d := openBackend(t, url)
		drivers = append(drivers, d)
	}
	var permits []permit
	slots := map[int]bool{}
	var last uint64
	for i := range size {
		p := mustPermit(t, ctx, drivers[i], semReq(key, size, faultMaxTTL))
		if p.Fence <= last {
			t.Errorf("permit %d: fence %d not above %d", i, p.Fence, last)
		}
		last = p.Fence
		if s := p.slot; slots[s] {
			t.Errorf("permit %d on slot %d, which is taken", i, s)
		} else {
			slots[s] = true
		}
		if len(p.voters) < 3 {
			t.Errorf("permit %d granted by %v, fewer than a quorum", i, p.voters)
		}
		permits = append(permits, p)
	}
	r := semReq(key, size, faultMaxTTL)
	start := time.Now()
	took := timed(func() { wantRefused(t, ctx, drivers[size], r) })
	t.Logf("a refusal on a full semaphore of %d took %v", size, took.Round(time.Microsecond))
	if left := withdrawnBy(t, clients, r.Token, start.Add(faultMaxTTL-200*time.Millisecond)); len(left) != 0 {
		t.Errorf("the refused attempt left %v", left)
	}

	permits[2].release(t, ctx, drivers[2])
	p := mustPermit(t, ctx, drivers[size], semReq(key, size, faultMaxTTL))
	if p.slot != permits[2].slot {
		t.Errorf("after slot %d was released, the next permit took %d", permits[2].slot, p.slot)
	}
	if p.Fence <= last {
		t.Errorf("fence %d after a release, not above %d", p.Fence, last)
	}
	wantRefused(t, ctx, drivers[0], semReq(key, size, faultMaxTTL))
	if err := drivers[2].Release(ctx, permits[2].key, permits[2].token); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("second release of a permit: %v, want ErrNotHeld", err)
	}

	// Refresh resets the slot's TTL on the nodes.
	if err := drivers[size].Refresh(ctx, p.key, p.token, 2*faultMaxTTL); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Refresh beyond max_ttl: %v, want ErrInvalid", err)
	}
	if err := drivers[size].Refresh(ctx, p.key, p.token, faultMaxTTL); err != nil {
		t.Fatalf("Refresh of a slot: %v", err)
	}
	if err := drivers[size].Refresh(ctx, p.key, "not-the-holder", faultMaxTTL); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Refresh of a slot by another token: %v, want ErrNotHeld", err)
	}

	// Each permit is released by the driver that won it, which knows its
	// slot.
	for i, q := range permits {
		if i != 2 {
			q.release(t, ctx, drivers[i])
		}
	}
	p.release(t, ctx, drivers[size])
	// A straggling reply of an acquisition is withdrawn when it lands:
	// wait for it rather than read too soon, but well within the permits'
	// TTL, by which a hold nobody withdrew would still be there.
	ctxKeys := context.Background()
	testutil.Eventually(t, faultMaxTTL/4, "nothing of the key but its slot's fence counter left on every node after every permit was released", func() bool {
		for _, c := range clients {
			if keys := c.Keys(ctxKeys, "dsync:{"+key+"}*").Val(); len(keys) != 0 || c.Exists(ctxKeys, redisnode.FenceKey("", key)).Val() != 1 {
				return false
			}
		}
		return true
	})
}

// TestSemaphoreExpiryFrees: permits that are not refreshed expire and free
// their slots, and the semaphore's limit goes with its last holder.
func TestSemaphoreExpiryFrees(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	clients := nodeClients(t, servers)
	_, d := openBackend(t, redlockURL(servers, faultQuery("")))
	ctx := semCtx(t)
	const key, ttl = "sem-expiry", 500 * time.Millisecond
	mustPermit(t, ctx, d, semReq(key, 2, ttl))
	mustPermit(t, ctx, d, semReq(key, 2, ttl))
	wantRefused(t, ctx, d, semReq(key, 2, ttl))
	full := time.Now()
	testutil.Eventually(t, ttl+faultSlack, "a slot freed by expiry", func() bool {
		_, err := d.Acquire(ctx, semReq(key, 2, ttl))
		return err == nil
	})
	t.Logf("a slot free %v after the semaphore was full (ttl %v)", time.Since(full).Round(time.Millisecond), ttl)
	// Once every permit has expired, so has the limit: a semaphore of
	// another size is welcome.
	_, err := d.Acquire(ctx, semReq(key, 3, ttl))
	var inv *backends.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("size 3 while size 2 is held: %v, want a mismatch", err)
	}
	testutil.Eventually(t, ttl+faultSlack, "the limit forgotten after every permit expired", func() bool {
		_, err := d.Acquire(ctx, semReq(key, 3, faultMaxTTL))
		return err == nil
	})
	// The grant was decided at quorum: a node whose reply is still in
	// flight may not have the marker yet, but no node keeps the old size.
	marked := 0
	for i, c := range clients {
		switch v := c.Get(ctx, "dsync:{"+key+"}").Val(); v {
		case "\n3":
			marked++
		case "":
		default:
			t.Errorf("node %d: marker %q, want the new size's", i, v)
		}
	}
	if marked < 3 {
		t.Errorf("%d nodes have the new size's marker, want a quorum of 3", marked)
	}
}

// TestSemaphoreWakesWaiters: the release of a slot reaches the watchers of
// the semaphore's key, on which blocking acquisition waits. (That undoing a
// failed attempt sends no notice is checked on one node in
// backends/redis.)
func TestSemaphoreWakesWaiters(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	_, d := openBackend(t, redlockURL(servers, faultQuery("")))
	_, waiter := openBackend(t, redlockURL(servers, faultQuery("")))
	clients := nodeClients(t, servers)
	ctx := semCtx(t)
	const key = "sem-wake"
	a := mustPermit(t, ctx, d, semReq(key, 2, faultMaxTTL))
	mustPermit(t, ctx, d, semReq(key, 2, faultMaxTTL))
	sub, err := waiter.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// WatchReleases returns once a quorum of nodes were sent SUBSCRIBE,
	// before they confirm it: wait until a quorum count a subscriber (a
	// release publishes on a quorum at least, so one of them hears it).
	channel := "dsync:{" + key + "}:released"
	testutil.Eventually(t, 10*time.Second, "the subscription active on a quorum of nodes", func() bool {
		n := 0
		for _, c := range clients {
			if c.PubSubNumSub(ctx, channel).Val()[channel] >= 1 {
				n++
			}
		}
		return n >= 3
	})
	wantRefused(t, ctx, waiter, semReq(key, 2, faultMaxTTL))
	released := time.Now()
	a.release(t, ctx, d)
	select {
	case <-sub.C():
		t.Logf("waiter woken %v after the release", time.Since(released).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the release of a slot did not wake the semaphore's waiters")
	}
	mustPermit(t, ctx, waiter, semReq(key, 2, faultMaxTTL))
}

// TestSemaphoreLimitMismatch: a quorum of nodes holding the key with
// another limit fails the attempt at once (not a wait), for semaphores of
// other sizes and for the lock of the key, both ways; a stale limit on a
// minority of nodes does not.
func TestSemaphoreLimitMismatch(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	clients := nodeClients(t, servers)
	_, d := openBackend(t, redlockURL(servers, faultQuery("")))
	ctx := semCtx(t)
	mismatch := func(err error, limit, holders int) {
		t.Helper()
		var inv *backends.InvalidError
		if !errors.As(err, &inv) || inv.Field != "size" ||
			!strings.Contains(inv.Reason, fmt.Sprint(limit)) || !strings.Contains(inv.Reason, fmt.Sprintf("size %d", holders)) {
			t.Errorf("err = %v, want LimitMismatch naming %d and %d", err, limit, holders)
		}
	}
	const key = "sem-mismatch"
	p := mustPermit(t, ctx, d, semReq(key, 3, faultMaxTTL))
	_, err := d.Acquire(ctx, semReq(key, 2, faultMaxTTL))
	mismatch(err, 2, 3)
	lockReq := backends.Request{Key: key, Token: rand.Text(), TTL: faultMaxTTL, Fence: true}
	start := time.Now()
	_, err = d.Acquire(ctx, lockReq)
	mismatch(err, 1, 3)
	if left := withdrawnBy(t, clients, lockReq.Token, start.Add(faultMaxTTL-200*time.Millisecond)); len(left) != 0 {
		t.Errorf("the refused lock left %v", left)
	}
	p.release(t, ctx, d)

	const lockKey = "lock-mismatch"
	lr := backends.Request{Key: lockKey, Token: rand.Text(), TTL: faultMaxTTL, Fence: true}
	if _, err := d.Acquire(ctx, lr); err != nil {
		t.Fatal(err)
	}
	_, err = d.Acquire(ctx, semReq(lockKey, 4, faultMaxTTL))
	mismatch(err, 4, 1)
	if err := d.Release(ctx, lockKey, lr.Token); err != nil {
		t.Fatal(err)
	}
	mustPermit(t, ctx, d, semReq(lockKey, 4, faultMaxTTL))

	// A limit left on 2 of 5 nodes (by a holder whose release missed them,
	// say) is outvoted: those nodes refuse, the other 3 grant.
	const stale = "sem-stale"
	for _, c := range clients[:2] {
		if err := c.Set(ctx, "dsync:{"+stale+"}", "\n7", faultMaxTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	q := mustPermit(t, ctx, d, semReq(stale, 2, faultMaxTTL))
	if !slices.Equal(q.voters, []int{2, 3, 4}) {
		t.Errorf("voters %v, want [2 3 4] (0 and 1 hold another limit)", q.voters)
	}
}

// TestSemaphoreHolder: Holder reports the holder a quorum agrees on whose
// permit expires last.
func TestSemaphoreHolder(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	_, d := openBackend(t, redlockURL(servers, faultQuery("")))
	ctx := semCtx(t)
	const key = "sem-holder"
	if _, err := d.Holder(ctx, key); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder of a free semaphore: %v, want ErrNotHeld", err)
	}
	r := semReq(key, 3, faultMaxTTL)
	r.Value = []byte("long")
	mustPermit(t, ctx, d, r)
	r = semReq(key, 3, faultMaxTTL/2)
	r.Value = []byte("short")
	mustPermit(t, ctx, d, r)
	info, err := d.Holder(ctx, key)
	if err != nil || string(info.Value) != "long" || info.TTL <= faultMaxTTL/2 {
		t.Errorf("Holder = %q, %v, %v; want the longer permit's value and TTL", info.Value, info.TTL, err)
	}
}

// TestSemaphoreKeys: the limits, and a permit found by its semaphore's key
// and token: another token, or the key's lock, is not it.
func TestSemaphoreKeys(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 3, nil)
	_, d := openBackend(t, redlockURL(servers, faultQuery("")))
	ctx := semCtx(t)
	if caps := d.Capabilities(); caps.MaxLimit != redlock.MaxLimit || redlock.MaxLimit < 2 {
		t.Errorf("MaxLimit %d, want redlock.MaxLimit (%d)", caps.MaxLimit, redlock.MaxLimit)
	}
	if _, err := d.Acquire(ctx, semReq("k", redlock.MaxLimit+1, faultMaxTTL)); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("limit MaxLimit+1: %v, want ErrInvalid", err)
	}
	p := mustPermit(t, ctx, d, semReq("k", 2, faultMaxTTL))
	for _, call := range []struct {
		name string
		err  func() error
	}{
		{"Release with empty key", func() error { return d.Release(ctx, "", p.token) }},
		{"Refresh with empty token", func() error { return d.Refresh(ctx, p.key, "", faultMaxTTL) }},
		{"Holder of an empty key", func() error { _, err := d.Holder(ctx, ""); return err }},
		{"WatchReleases of an empty key", func() error { _, err := d.WatchReleases(ctx, ""); return err }},
	} {
		if err := call.err(); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", call.name, err)
		}
	}
	// Another token's Release goes to the key's lock, which the marker
	// holds for the slots: nothing of the permit is touched.
	if err := d.Release(ctx, "k", "not-the-holder"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Release of the semaphore's key with another token: %v, want ErrNotHeld", err)
	}
	if err := d.Refresh(ctx, "k", p.token, faultMaxTTL); err != nil {
		t.Errorf("Refresh of the permit by its semaphore's key: %v", err)
	}
	p.release(t, ctx, d)
	if _, ok := redlock.SlotOf(d, "k", p.token); ok {
		t.Error("the driver still knows the slot of a released permit")
	}
}

// hammer runs goroutines on several drivers that take permits of one
// semaphore and count the holders on one clock, until stop is closed. A
// permit counts while its hold is surely valid: entered well within its
// TTL of the start of its attempt and left before. It also keeps every
// fencing token granted: permits drawn at the same time on different slots
// must not share one.
type hammer struct {
	inside, most, sections atomic.Int32
	errs                   chan error
	wg                     sync.WaitGroup

	mu     sync.Mutex
	fences map[uint64]int // grants per token; protected by mu
}

func startHammer(t *testing.T, drivers []*redlock.Driver, key string, size, perDriver int, stop <-chan struct{}) *hammer {
	h := &hammer{errs: make(chan error, len(drivers)*perDriver), fences: map[uint64]int{}}
	const ttl = faultMaxTTL
	for _, d := range drivers {
		for range perDriver {
			h.wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					r := semReq(key, size, ttl)
					ctx, cancel := context.WithTimeout(context.Background(), ttl/4)
					start := time.Now()
					g, err := d.Acquire(ctx, r)
					cancel()
					if err != nil {
						if errors.Is(err, backends.ErrInvalid) {
							h.errs <- err
							return
						}
						time.Sleep(time.Duration(1+time.Now().UnixNano()%5) * time.Millisecond) // jitter
						continue
					}
					h.mu.Lock()
					h.fences[g.Fence]++
					h.mu.Unlock()
					if time.Since(start) < ttl/3 {
						n := h.inside.Add(1)
						for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
						}
						time.Sleep(2 * time.Millisecond) // the work, so that holders overlap
						h.sections.Add(1)
						h.inside.Add(-1)
					}
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = d.Release(rctx, r.Key, r.Token) // may miss a dead node's quorum share: the hold expires
					cancel()
				}
			})
		}
	}
	return h
}

func (h *hammer) wait(t *testing.T, size int) {
	t.Helper()
	h.wg.Wait()
	close(h.errs)
	for err := range h.errs {
		t.Error(err)
	}
	if m := h.most.Load(); m > int32(size) {
		t.Fatalf("%d holders at once in a semaphore of size %d", m, size)
	} else if m < int32(size) {
		t.Errorf("at most %d holders at once: the hammer never filled the semaphore of size %d", m, size)
	}
	if h.sections.Load() == 0 {
		t.Fatal("no critical section ran")
	}
	for fence, n := range h.fences {
		if n > 1 {
			t.Errorf("fencing token %d granted to %d permits", fence, n)
		}
	}
}

// awaitFull waits until the hammer has had size holders at once: a bound
// is only shown to hold if it was reached.
func (h *hammer) awaitFull(t *testing.T, size int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d holders at once", size), func() bool { return h.most.Load() >= int32(size) })
}

// awaitSections waits until the hammer has run n more critical sections.
//
// The bound is a liveness check, generous: alone, 50 sections with a
// master paused took 9.6 s (a split round waits out the paused master's
// node timeout, and so does its withdrawal), and the full suite on a
// loaded 2-core machine runs several times slower (30 s was once not
// enough).
func (h *hammer) awaitSections(t *testing.T, n int32, what string) {
	t.Helper()
	from, start := h.sections.Load(), time.Now()
	testutil.Eventually(t, 90*time.Second, what, func() bool { return h.sections.Load() >= from+n })
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// TestSemaphoreHammer: goroutines on several drivers never hold more than
// Size permits at once, with all nodes up, then with one and two of the 5
// killed.
func TestSemaphoreHammer(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	url := redlockURL(servers, faultQuery(""))
	var drivers []*redlock.Driver
	for range 4 {
		_, d := openBackend(t, url)
		drivers = append(drivers, d)
	}
	const size = 3
	stop := make(chan struct{})
	h := startHammer(t, drivers, "sem-hammer", size, 3, stop)
	h.awaitSections(t, 100, "100 sections with every node up")
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	h.awaitSections(t, 100, "100 sections with node 1 dead")
	if err := servers[3].Kill(); err != nil {
		t.Fatal(err)
	}
	h.awaitSections(t, 100, "100 sections with nodes 1 and 3 dead")
	h.awaitFull(t, size)
	close(stop)
	h.wait(t, size)
	t.Logf("%d sections, at most %d holders at once (size %d)", h.sections.Load(), h.most.Load(), size)
}

// TestSemaphoreHammerPaused: the bound holds with one of the 5 masters
// paused (SIGSTOP: connections open, nothing answers) and after it resumes
// with the requests it queued.
func TestSemaphoreHammerPaused(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	url := redlockURL(servers, faultQuery(""))
	var drivers []*redlock.Driver
	for range 3 {
		_, d := openBackend(t, url)
		drivers = append(drivers, d)
	}
	t.Cleanup(func() { _ = servers[2].Resume() }) // before the drivers close
	const size = 2
	stop := make(chan struct{})
	h := startHammer(t, drivers, "sem-paused", size, 3, stop)
	h.awaitSections(t, 50, "50 sections with every node up")
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	h.awaitSections(t, 50, "50 sections with node 2 paused")
	if err := servers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	h.awaitSections(t, 50, "50 sections after node 2 resumed")
	h.awaitFull(t, size)
	close(stop)
	h.wait(t, size)
	t.Logf("%d sections, at most %d holders at once (size %d)", h.sections.Load(), h.most.Load(), size)
}

// overAdmitted is the check both designs go through: an error when more
// clients hold the semaphore than its size.
func overAdmitted(holders []string, size int) error {
	if len(holders) > size {
		return fmt.Errorf("%d holders %v in a semaphore of size %d", len(holders), holders, size)
	}
	return nil
}

// TestNaiveQuorumSemaphoreOverAdmits is the negative control: with 5 nodes
// and size 2, three clients that each reach 3 nodes (A: 0,1,2; B: 2,3,4;
// C: 0,1,3; then each reaches the other 2, late) are each admitted by a
// majority under the naive design, while no node ever admits more than 2:
// the check finds 3 holders. The same three clients on this driver, each
// cut off from the same nodes by a TCP proxy, get at most 2 permits.
func TestNaiveQuorumSemaphoreOverAdmits(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 5, nil)
	clients := nodeClients(t, servers)
	ctx := semCtx(t)
	const size, quorum = 2, 3
	reach := map[string][]int{"A": {0, 1, 2}, "B": {2, 3, 4}, "C": {0, 1, 3}}
	late := map[string][]int{"A": {3, 4}, "B": {0, 1}, "C": {2, 4}}
	names := []string{"A", "B", "C"}

	// The naive design, step by step.
	const naiveKey = "naive-sem"
	admitted := map[string]int{}
	for _, step := range []map[string][]int{reach, late} {
		for _, name := range names {
			for _, i := range step[name] {
				ok, err := redistest.NaiveSemAcquire.Run(ctx, clients[i], []string{naiveKey}, name, size, faultMaxTTL.Milliseconds()).Int()
				if err != nil {
					t.Fatal(err)
				}
				admitted[name] += ok
				if n := clients[i].ZCard(ctx, naiveKey).Val(); n > size {
					t.Fatalf("node %d admitted %d: the schedule is wrong", i, n)
				}
			}
		}
	}
	var naiveHolders []string
	for _, name := range names {
		if admitted[name] >= quorum {
			naiveHolders = append(naiveHolders, name)
		}
	}
	err := overAdmitted(naiveHolders, size)
	if err == nil {
		t.Fatalf("negative control: the naive design admitted %v (%v), and the check found no violation", naiveHolders, admitted)
	}
	t.Logf("negative control: naive quorum sets admit %v: %v", admitted, err)

	// This driver, with the same reachability: each client's connections to
	// the nodes it does not reach go through a proxy that refuses them.
	holders := partitionedHolders(t, servers, clients, "sem-control", nil)
	if err := overAdmitted(holders, size); err != nil {
		t.Fatalf("redlock: %v", err)
	}
	if !slices.Equal(holders, []string{"A", "B"}) {
		t.Errorf("holders %v, want [A B]: A and B reach 3 nodes free of each other's slot", holders)
	}
}

// foreignMaster: a client's address of master i reaches addr, a server
// outside the masters.
type foreignMaster struct {
	client string
	i      int
	addr   string
}

// partitionedHolders runs the partition of TestNaiveQuorumSemaphoreOverAdmits
// on this driver: A, B and C each try for a permit of a semaphore of size
// 2, in that order, each reaching its 3 masters (the links to the others
// refuse), except what foreign says. An attempt without a quorum's answer
// in time (a loaded machine, new connections) tries again; a refused one
// must leave nothing on the masters (clients), each node withdrawn, a node
// that answered after the round was decided when its reply landed. It
// returns the clients granted a permit, each by a majority of the masters
// it reaches, once the permits granted are all valid when the last attempt
// returns, as a lease would count them (the TTL less 1% and 2ms from
// before the attempt); a trial on a machine so slow that one was not runs
// again, on a new key, up to 3 times.
func partitionedHolders(t *testing.T, servers []*redistest.Server, clients []*goredis.Client, key string, foreign *foreignMaster) []string {
	t.Helper()
	var why []string
	for trial := range 3 {
		holders, late := partitionTrial(t, servers, clients, fmt.Sprintf("%s-%d", key, trial), foreign)
		if late == "" {
			return holders
		}
		t.Logf("trial %d cannot judge, so it runs again: %s", trial+1, late)
		why = append(why, late)
	}
	t.Fatalf("cannot judge in 3 trials: %v", why)
	return nil
}

// acquireHeard makes an attempt with a request from next, and another with a
// new one (a new token, as the lease layer's attempts have) while no quorum
// answered in time, up to 10: on a loaded machine, a fresh driver's first
// rounds open its connections within a short per-node timeout. It returns
// the last request, when its attempt began, and the attempt's outcome.
func acquireHeard(ctx context.Context, d *redlock.Driver, next func() backends.Request) (backends.Request, time.Time, backends.Grant, error) {
	var (
		r     backends.Request
		start time.Time
		g     backends.Grant
		err   error
	)
	for range 10 {
		r, start = next(), time.Now()
		if g, err = d.Acquire(ctx, r); !errors.Is(err, redlock.ErrNoQuorum) {
			break
		}
	}
	return r, start, g, err
}

// partitionTrial is one trial of partitionedHolders: the holders, or why
// the trial cannot judge.
func partitionTrial(t *testing.T, servers []*redistest.Server, clients []*goredis.Client, key string, foreign *foreignMaster) (holders []string, late string) {
	t.Helper()
	ctx := semCtx(t)
	reach := map[string][]int{"A": {0, 1, 2}, "B": {2, 3, 4}, "C": {0, 1, 3}}
	validUntil := map[string]time.Time{}
	began := time.Now()
	for _, name := range []string{"A", "B", "C"} {
		addrs := make([]string, len(servers))
		for i, s := range servers {
			p := faultproxy.Start(t, s.Addr())
			addrs[i] = p.Addr()
			if foreign != nil && foreign.client == name && foreign.i == i {
				addrs[i] = foreign.addr
			} else if !slices.Contains(reach[name], i) {
				if err := p.Refuse(); err != nil {
					t.Fatal(err)
				}
			}
		}
		_, d := openBackend(t, addrURL(addrs, faultQuery("")))
		r, start, g, err := acquireHeard(ctx, d, func() backends.Request { return semReq(key, 2, faultMaxTTL) })
		switch {
		case err == nil:
			holders = append(holders, name)
			validUntil[name] = start.Add(faultMaxTTL - faultMaxTTL/100 - 2*time.Millisecond)
			slot, _ := redlock.SlotOf(d, r.Key, r.Token)
			t.Logf("+%v: %s holds slot %d, token %d, granted by its masters %v", time.Since(began).Round(time.Millisecond), name, slot, g.Fence, redlock.Voters(r.Key, r.Token))
		case errors.Is(err, backends.ErrNotAcquired) && !errors.Is(err, redlock.ErrNoQuorum):
			t.Logf("+%v: %s refused: %v", time.Since(began).Round(time.Millisecond), name, err)
			if left := withdrawnBy(t, clients, r.Token, start.Add(faultMaxTTL-200*time.Millisecond)); len(left) != 0 {
				t.Errorf("%s's refused attempt left %v", name, left)
			}
		default:
			t.Fatalf("%s: %v", name, err)
		}
		for who, until := range validUntil {
			if now := time.Now(); !now.Before(until) {
				return nil, fmt.Sprintf("%s's permit was no longer valid when %s's attempt returned", who, name)
			}
		}
	}
	return holders, ""
}

// TestSemaphoreForeignMasterOverAdmits is the mechanism of the
// over-admission once seen in the torture suite's partitioned semaphore,
// made to happen every time: C's address of master 2, which it should not
// reach, reaches a server outside the five (there, another test's server
// had taken the port of a refused proxy). C then has 4 masters, and a
// majority of them, {0, 1, foreign}, shares no master with B's {2, 3, 4}:
// C is granted B's slot, and the semaphore of size 2 has 3 holders. With
// the five masters shared, C is refused (TestNaiveQuorumSemaphoreOverAdmits,
// the same partition on the same driver). The Redlock
// argument holds for clients that reach the same masters, and only for
// them (docs/redlock.md, "Why two holders of one slot cannot be").
func TestSemaphoreForeignMasterOverAdmits(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 6, nil)
	masters, outsider := servers[:5], servers[5]
	holders := partitionedHolders(t, masters, nodeClients(t, masters), "sem-foreign", &foreignMaster{"C", 2, outsider.Addr()})
	if !slices.Equal(holders, []string{"A", "B", "C"}) {
		t.Fatalf("negative control: with C's master 2 a server outside the five, holders %v, want [A B C]", holders)
	}
	t.Logf("negative control: %v", overAdmitted(holders, 2))
}

// TestCloseDuringCalls closes a driver while goroutines keep calling it
// (locks and semaphores, acquire, refresh, release, watch): every call
// returns, the race detector sees no start of a goroutine racing with
// Close's wait for them, and calls after Close fail with ErrClosed.
func TestCloseDuringCalls(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 3, nil)
	url := redlockURL(servers, faultQuery(""))
	for round := range 20 {
		b := open(t, url)
		d := lease.Driver(b).(*redlock.Driver)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				ctx := context.Background()
				for {
					select {
					case <-stop:
						return
					default:
					}
					r := semReq(fmt.Sprintf("close-%d-%d", round, g%3), 1+g%3, faultMaxTTL)
					_, err := d.Acquire(ctx, r)
					if err != nil {
						if sub, err := d.WatchReleases(ctx, r.Key); err == nil {
							sub.Close()
						}
						continue
					}
					_ = d.Refresh(ctx, r.Key, r.Token, faultMaxTTL)
					_, _ = d.Holder(ctx, r.Key)
					_ = d.Release(ctx, r.Key, r.Token)
				}
			})
		}
		time.Sleep(time.Duration(5+round) * time.Millisecond) // let calls be in flight, at various stages
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		close(stop)
		wg.Wait()
		if _, err := d.Acquire(context.Background(), semReq("after", 2, faultMaxTTL)); !errors.Is(err, backends.ErrClosed) {
			t.Errorf("Acquire after Close: %v, want ErrClosed", err)
		}
	}
}
