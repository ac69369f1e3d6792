package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// The slot operations are one node's part of a Redlock semaphore; the
// redlock package tests the quorum over them. These tests check one node:
// the layout, the limit marker and its lifetime, fencing, mismatches.

func slotDriver(t *testing.T) (*redisnode.Node, *goredis.Client, context.Context) {
	t.Helper()
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	d, err := redisnode.New(client, "")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return d, client, ctx
}

// slotReq is an attempt on slot of a semaphore of limit slots.
type slotReq struct {
	redisnode.Target
	redisnode.Hold
}

func newSlotReq(key, token string, limit, slot int) slotReq {
	return slotReq{redisnode.Target{Key: key, Slot: slot, Slots: limit}, redisnode.Hold{Token: token, TTL: time.Minute, Fence: true}}
}

func lockReq(key, token string) slotReq {
	return slotReq{redisnode.Target{Key: key}, redisnode.Hold{Token: token, TTL: time.Minute, Fence: true}}
}

func (r slotReq) try(ctx context.Context, d *redisnode.Node) (uint64, error) {
	return d.Acquire(ctx, r.Target, r.Hold)
}

func mustSlot(t *testing.T, ctx context.Context, d *redisnode.Node, r slotReq) uint64 {
	t.Helper()
	f, err := r.try(ctx, d)
	if err != nil {
		t.Fatalf("Acquire(%+v, token %q): %v", r.Target, r.Token, err)
	}
	return f
}

func keysOf(t *testing.T, ctx context.Context, c *goredis.Client) []string {
	t.Helper()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func TestSlotLayoutAndLifetime(t *testing.T) {
	d, c, ctx := slotDriver(t)
	r0 := newSlotReq("sem", "a", 3, 0)
	r0.Value = []byte("va")
	g0 := mustSlot(t, ctx, d, r0)
	short := newSlotReq("sem", "b", 3, 2)
	short.TTL = 30 * time.Second
	g2 := mustSlot(t, ctx, d, short)
	if g0 == 0 || g2 <= g0 {
		t.Errorf("fences %d then %d: want non-zero and strictly increasing across slots", g0, g2)
	}
	fence := redisnode.FenceKey("", "sem")
	want := []string{fence, "dsync:{sem}", "dsync:{sem}:slot:0", "dsync:{sem}:slot:2"}
	if got := keysOf(t, ctx, c); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	if v, want := c.Get(ctx, "dsync:{sem}:slot:0").Val(), fmt.Sprintf("a\t%d\nva", g0); v != want {
		t.Errorf("slot 0 = %q, want %q (token, fence, value)", v, want)
	}
	if v := c.Get(ctx, "dsync:{sem}").Val(); v != "\n3" {
		t.Errorf("marker = %q, want %q", v, "\n3")
	}
	if n, _ := c.Get(ctx, fence).Uint64(); n != g2 {
		t.Errorf("fence counter %d, want the last grant's %d", n, g2)
	}
	markerTTL := func() time.Duration { return c.PTTL(ctx, "dsync:{sem}").Val() }
	if m := markerTTL(); m < 55*time.Second {
		t.Errorf("marker PTTL %v, want at least the longest slot's (about 1m)", m)
	}

	// A taken slot refuses; another token's refresh and release are no-ops.
	if _, err := newSlotReq("sem", "c", 3, 0).try(ctx, d); !errors.Is(err, backends.ErrNotAcquired) {
		t.Errorf("AcquireSlot of a taken slot: %v, want ErrNotAcquired", err)
	}
	if err := d.Refresh(ctx, redisnode.Target{Key: "sem", Slot: 0, Slots: 3}, "c", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("RefreshSlot by another token: %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, redisnode.Target{Key: "sem", Slot: 0, Slots: 3}, "c", true); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("ReleaseSlot by another token: %v, want ErrNotHeld", err)
	}

	// Refresh keeps the marker at least as long as the slot.
	if err := d.Refresh(ctx, redisnode.Target{Key: "sem", Slot: 2, Slots: 3}, "b", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := markerTTL(); m < 115*time.Second {
		t.Errorf("marker PTTL %v after a slot was refreshed to 2m, want about 2m", m)
	}

	holds, err := d.Holds(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2 || holds[0].Target != (redisnode.Target{Key: "sem", Slot: 0, Slots: 3}) || holds[0].Token != "a" || string(holds[0].Value) != "va" ||
		holds[1].Target != (redisnode.Target{Key: "sem", Slot: 2, Slots: 3}) || holds[1].Token != "b" || holds[1].Value != nil || holds[1].TTL < 115*time.Second {
		t.Errorf("Holds = %+v", holds)
	}

	// Releasing the longer slot cuts the marker to the one left; releasing
	// the last one removes it: only the fence counter stays.
	// Notices, read on a subscription of our own: a message we publish
	// after each call shows whether the call published before it.
	ps := c.Subscribe(ctx, "dsync:{sem}:released")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	next := func(after string) string {
		t.Helper()
		c.Publish(ctx, "dsync:{sem}:released", "marker")
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		if m.Payload != "marker" {
			if m2, err := ps.ReceiveMessage(ctx); err != nil || m2.Payload != "marker" {
				t.Fatalf("after %s: %v, %v", after, m2, err)
			}
		}
		return m.Payload
	}
	if err := d.Release(ctx, redisnode.Target{Key: "sem", Slot: 2, Slots: 3}, "b", true); err != nil {
		t.Fatal(err)
	}
	if got := next("ReleaseSlot"); got != "released" {
		t.Error("no release notice on the semaphore's channel after a slot's release")
	}
	if m := markerTTL(); m > 61*time.Second || m < 50*time.Second {
		t.Errorf("marker PTTL %v after the 2m slot's release, want the 1m slot's", m)
	}
	if err := d.Release(ctx, redisnode.Target{Key: "sem", Slot: 0, Slots: 3}, "a", false); err != nil {
		t.Fatal(err)
	}
	if got := next("WithdrawSlot"); got != "marker" {
		t.Error("a withdrawal sent a release notice")
	}
	if got := keysOf(t, ctx, c); !slices.Equal(got, []string{fence}) {
		t.Errorf("keys after the last slot went: %q, want only the fence counter", got)
	}
	if err := d.Release(ctx, redisnode.Target{Key: "sem", Slot: 0, Slots: 3}, "a", true); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
	// With no holder left, the key forgets its limit.
	g := mustSlot(t, ctx, d, newSlotReq("sem", "d", 5, 4))
	if g <= g2 {
		t.Errorf("fence %d after the semaphore emptied, want above %d", g, g2)
	}
}

func TestSlotExpiryTakesMarker(t *testing.T) {
	d, c, ctx := slotDriver(t)
	r := newSlotReq("sem", "a", 2, 1)
	r.TTL = 100 * time.Millisecond
	mustSlot(t, ctx, d, r)
	deadline := time.Now().Add(5 * time.Second)
	for len(keysOf(t, ctx, c)) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("keys %q long after the only slot's TTL", keysOf(t, ctx, c))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Refresh(ctx, r.Target, "a", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("RefreshSlot after expiry: %v, want ErrNotHeld", err)
	}
	if got := keysOf(t, ctx, c); !slices.Equal(got, []string{redisnode.FenceKey("", "sem")}) {
		t.Errorf("RefreshSlot after expiry left %q", got)
	}
}

func TestSlotLimitMismatch(t *testing.T) {
	d, _, ctx := slotDriver(t)
	mustSlot(t, ctx, d, newSlotReq("sem", "a", 3, 1))
	var le *redisnode.LimitError
	_, err := newSlotReq("sem", "b", 2, 0).try(ctx, d)
	if !errors.As(err, &le) || le.Limit != 2 || le.Holders != 3 {
		t.Fatalf("AcquireSlot with limit 2 while 3 holds: %v, want a LimitError 2 vs 3", err)
	}
	if errors.Is(err, backends.ErrInvalid) {
		t.Error("one node's LimitError matches ErrInvalid; only a quorum's mismatch may")
	}
	// The lock of the key is refused beside the slots, and says why, with
	// fencing (one script) and without (SET NX, then the key's limit).
	for _, fence := range []bool{true, false} {
		l := lockReq("sem", "l")
		l.Fence = fence
		if _, err := l.try(ctx, d); !errors.As(err, &le) || le.Limit != 1 || le.Holders != 3 {
			t.Errorf("lock beside a semaphore's slots (fence %v): %v, want a LimitError 1 vs 3", fence, err)
		}
	}
	if err := d.Release(ctx, redisnode.Target{Key: "sem"}, "l", false); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("withdrawal of the refused lock: %v, want ErrNotHeld", err)
	}

	// A held lock refuses slots.
	mustSlot(t, ctx, d, lockReq("lock", "l"))
	if _, err := newSlotReq("lock", "b", 2, 0).try(ctx, d); !errors.As(err, &le) || le.Holders != 1 {
		t.Errorf("slot while the lock is held: %v, want a LimitError naming 1", err)
	}
	if _, err := lockReq("lock", "m").try(ctx, d); !errors.Is(err, backends.ErrNotAcquired) {
		t.Errorf("lock while the lock is held: %v, want ErrNotAcquired", err)
	}
	if err := d.Release(ctx, redisnode.Target{Key: "lock"}, "other", false); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("withdrawal by another token: %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, redisnode.Target{Key: "lock"}, "l", false); err != nil {
		t.Errorf("withdrawal by the holder: %v", err)
	}
	mustSlot(t, ctx, d, newSlotReq("lock", "b", 2, 0))
	holds, err := d.Holds(ctx, "nothing")
	if err != nil || len(holds) != 0 {
		t.Errorf("Holds of a free key: %v, %v", holds, err)
	}
}

func TestSlotInvalid(t *testing.T) {
	d, _, ctx := slotDriver(t)
	for _, tc := range []struct {
		name string
		req  slotReq
	}{
		{"limit 1", newSlotReq("k", "t", 1, 0)},
		{"slot at the limit", newSlotReq("k", "t", 2, 2)},
		{"negative slot", newSlotReq("k", "t", 2, -1)},
		{"limit above MaxSlots", newSlotReq("k", "t", redisnode.MaxSlots+1, 0)},
		{"empty token", newSlotReq("k", "", 2, 0)},
		{"token with a newline", newSlotReq("k", "a\nb", 2, 0)},
		{"empty key", newSlotReq("", "t", 2, 0)},
	} {
		if _, err := tc.req.try(ctx, d); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := d.Refresh(ctx, redisnode.Target{Key: "k", Slot: redisnode.MaxSlots, Slots: redisnode.MaxSlots}, "t", time.Second); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Refresh of slot MaxSlots: %v, want ErrInvalid", err)
	}
}

// TestSeededCounters: a missing fence counter of a Redlock node starts at
// the server's clock in microseconds, rounded down to the seed step, for a
// lock and for a semaphore's slot; an existing one only counts up.
func TestSeededCounters(t *testing.T) {
	d, c, ctx := slotDriver(t)
	serverMicros := func() int64 {
		t.Helper()
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMicro()
	}
	for _, step := range []time.Duration{0, time.Millisecond, 7500 * time.Millisecond} {
		stepUS := max(step.Microseconds(), 1)
		acquire := map[string]func(key string) (uint64, error){
			"lock": func(key string) (uint64, error) {
				r := lockReq(key, "t")
				r.SeedStep = step
				return r.try(ctx, d)
			},
			"slot": func(key string) (uint64, error) {
				r := newSlotReq(key, "t", 2, 1)
				r.SeedStep = step
				return r.try(ctx, d)
			},
		}
		for kind, acquire := range acquire {
			key := fmt.Sprintf("%s-%v", kind, step)
			// Each key must seed a counter of its own: no earlier key of
			// the test may share its hash slot.
			if c.Exists(ctx, redisnode.FenceKey("", key)).Val() == 1 {
				t.Fatalf("%s shares its fence counter with an earlier key of the test: rename it", key)
			}
			before := serverMicros()
			g, err := acquire(key)
			if err != nil {
				t.Fatalf("%s, step %v: %v", kind, step, err)
			}
			after := serverMicros()
			seed := int64(g) - 1
			if seed%stepUS != 0 || seed > after || seed <= before-stepUS {
				t.Errorf("%s, step %v: counter seeded at %d, want a multiple of %d µs in (%d, %d]", kind, step, seed, stepUS, before-stepUS, after)
			}
			if err := c.Del(ctx, "dsync:{"+key+"}", "dsync:{"+key+"}:slot:1").Err(); err != nil {
				t.Fatal(err)
			}
			if g2, err := acquire(key); err != nil || g2 != g+1 {
				t.Errorf("%s, step %v, again: fence %d, %v; want %d", kind, step, g2, err, g+1)
			}
		}
	}
}

// TestHoldRecordsItsFence: a hold records the fencing token it drew, which
// Holder and Holds report, and which refresh and release read past; one
// without a token records none; RaiseFence records the token it writes
// back in the hold it names, and in no other.
func TestHoldRecordsItsFence(t *testing.T) {
	d, c, ctx := slotDriver(t)
	fenced := lockReq("fenced", "tok")
	fenced.Value = []byte("v\tx\ny") // a value may hold the separators
	f := mustSlot(t, ctx, d, fenced)
	if info, err := d.Holder(ctx, "fenced"); err != nil || info.Fence != f || string(info.Value) != "v\tx\ny" {
		t.Fatalf("Holder = %+v, %v; want fence %d and the value", info, err, f)
	}
	plain := lockReq("plain", "tok")
	plain.Fence = false
	mustSlot(t, ctx, d, plain)
	if info, err := d.Holder(ctx, "plain"); err != nil || info.Fence != 0 {
		t.Fatalf("Holder of an unfenced hold = %+v, %v; want fence 0", info, err)
	}

	if err := d.RaiseFence(ctx, fenced.Target, "tok", f+10); err != nil {
		t.Fatal(err)
	}
	if err := d.RaiseFence(ctx, plain.Target, "another", f+20); err != nil {
		t.Fatal(err)
	}
	hs, err := d.Holds(ctx, "fenced")
	if err != nil || len(hs) != 1 || hs[0].Token != "tok" || hs[0].Fence != f+10 || string(hs[0].Value) != "v\tx\ny" {
		t.Fatalf("Holds after RaiseFence = %+v, %v; want tok with fence %d and the value", hs, err, f+10)
	}
	if info, err := d.Holder(ctx, "plain"); err != nil || info.Fence != 0 {
		t.Fatalf("Holder of a hold RaiseFence did not name = %+v, %v; want fence 0", info, err)
	}
	if ttl := c.PTTL(ctx, "dsync:{fenced}").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL after RaiseFence = %v, want the hold's TTL kept", ttl)
	}

	for _, r := range []slotReq{fenced, plain} {
		if err := d.Refresh(ctx, r.Target, "tok", time.Minute); err != nil {
			t.Errorf("Refresh of %q: %v", r.Key, err)
		}
		if err := d.Refresh(ctx, r.Target, "to", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
			t.Errorf("Refresh of %q by a prefix of its token = %v, want ErrNotHeld", r.Key, err)
		}
		if err := d.Release(ctx, r.Target, "tok", true); err != nil {
			t.Errorf("Release of %q: %v", r.Key, err)
		}
	}
}

// TestPlainAttemptAllocates: an unfenced lock attempt with no waiter, the
// uncontended one and a plain SET NX PX, allocates what that SET does and
// the key's name, and nothing for the script it does not run.
func TestPlainAttemptAllocates(t *testing.T) {
	d, c, ctx := slotDriver(t)
	lock := redisnode.Target{Key: "k"}
	hold := redisnode.Hold{Token: "t", TTL: time.Minute}
	attempt := testing.AllocsPerRun(100, func() {
		if _, err := d.Acquire(ctx, lock, hold); err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, "dsync:{k}")
	})
	key := "dsync:{" + lock.Key + "}" // not a constant, as the node's is not
	set := testing.AllocsPerRun(100, func() {
		if err := c.SetArgs(ctx, key, hold.Token, goredis.SetArgs{Mode: "NX", TTL: hold.TTL}).Err(); err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, "dsync:{k}")
	})
	if attempt > set+1 {
		t.Errorf("an unfenced attempt and a DEL allocate %v, want at most %v: the SET NX PX and a DEL (%v), and the key's name", attempt, set+1, set)
	}
}
