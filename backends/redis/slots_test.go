package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// The slot operations are one node's part of a Redlock semaphore; the
// redlock package tests the quorum over them. These tests check one node:
// the layout, the limit marker and its lifetime, fencing, mismatches.

func slotDriver(t *testing.T) (*redis.Driver, *goredis.Client, context.Context) {
	t.Helper()
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	d, err := redis.New(client, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return d, client, ctx
}

func slotReq(key, token string, limit int) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: time.Minute, Limit: limit, Fence: true}
}

func mustSlot(t *testing.T, ctx context.Context, d *redis.Driver, r backends.Request, slot int) backends.Grant {
	t.Helper()
	g, err := d.AcquireSlot(ctx, r, slot, 0)
	if err != nil {
		t.Fatalf("AcquireSlot(%q, slot %d, token %q): %v", r.Key, slot, r.Token, err)
	}
	return g
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
	r0 := slotReq("sem", "a", 3)
	r0.Value = []byte("va")
	g0 := mustSlot(t, ctx, d, r0, 0)
	short := slotReq("sem", "b", 3)
	short.TTL = 30 * time.Second
	g2 := mustSlot(t, ctx, d, short, 2)
	if g0.Fence == 0 || g2.Fence <= g0.Fence {
		t.Errorf("fences %d then %d: want non-zero and strictly increasing across slots", g0.Fence, g2.Fence)
	}
	fence := redis.FenceKey("", "sem")
	want := []string{fence, "dsync:{sem}", "dsync:{sem}:slot:0", "dsync:{sem}:slot:2"}
	if got := keysOf(t, ctx, c); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	if v := c.Get(ctx, "dsync:{sem}:slot:0").Val(); v != "a\nva" {
		t.Errorf("slot 0 = %q, want %q", v, "a\nva")
	}
	if v := c.Get(ctx, "dsync:{sem}").Val(); v != "\n3" {
		t.Errorf("marker = %q, want %q", v, "\n3")
	}
	if n, _ := c.Get(ctx, fence).Uint64(); n != g2.Fence {
		t.Errorf("fence counter %d, want the last grant's %d", n, g2.Fence)
	}
	markerTTL := func() time.Duration { return c.PTTL(ctx, "dsync:{sem}").Val() }
	if m := markerTTL(); m < 55*time.Second {
		t.Errorf("marker PTTL %v, want at least the longest slot's (about 1m)", m)
	}

	// A taken slot refuses; another token's refresh and release are no-ops.
	if _, err := d.AcquireSlot(ctx, slotReq("sem", "c", 3), 0, 0); !errors.Is(err, backends.ErrNotAcquired) {
		t.Errorf("AcquireSlot of a taken slot: %v, want ErrNotAcquired", err)
	}
	if err := d.RefreshSlot(ctx, "sem", 0, "c", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("RefreshSlot by another token: %v, want ErrNotHeld", err)
	}
	if err := d.ReleaseSlot(ctx, "sem", 0, "c"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("ReleaseSlot by another token: %v, want ErrNotHeld", err)
	}

	// Refresh keeps the marker at least as long as the slot.
	if err := d.RefreshSlot(ctx, "sem", 2, "b", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := markerTTL(); m < 115*time.Second {
		t.Errorf("marker PTTL %v after a slot was refreshed to 2m, want about 2m", m)
	}

	holds, err := d.SlotHolds(ctx, "sem")
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2 || holds[0].Slot != 0 || holds[0].Token != "a" || string(holds[0].Value) != "va" || holds[0].Limit != 3 ||
		holds[1].Slot != 2 || holds[1].Token != "b" || holds[1].Value != nil || holds[1].TTL < 115*time.Second {
		t.Errorf("SlotHolds = %+v", holds)
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
	if err := d.ReleaseSlot(ctx, "sem", 2, "b"); err != nil {
		t.Fatal(err)
	}
	if got := next("ReleaseSlot"); got != "released" {
		t.Error("no release notice on the semaphore's channel after a slot's release")
	}
	if m := markerTTL(); m > 61*time.Second || m < 50*time.Second {
		t.Errorf("marker PTTL %v after the 2m slot's release, want the 1m slot's", m)
	}
	if err := d.WithdrawSlot(ctx, "sem", 0, "a"); err != nil {
		t.Fatal(err)
	}
	if got := next("WithdrawSlot"); got != "marker" {
		t.Error("a withdrawal sent a release notice")
	}
	if got := keysOf(t, ctx, c); !slices.Equal(got, []string{fence}) {
		t.Errorf("keys after the last slot went: %q, want only the fence counter", got)
	}
	if err := d.ReleaseSlot(ctx, "sem", 0, "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
	// With no holder left, the key forgets its limit.
	g := mustSlot(t, ctx, d, slotReq("sem", "d", 5), 4)
	if g.Fence <= g2.Fence {
		t.Errorf("fence %d after the semaphore emptied, want above %d", g.Fence, g2.Fence)
	}
}

func TestSlotExpiryTakesMarker(t *testing.T) {
	d, c, ctx := slotDriver(t)
	r := slotReq("sem", "a", 2)
	r.TTL = 100 * time.Millisecond
	mustSlot(t, ctx, d, r, 1)
	deadline := time.Now().Add(5 * time.Second)
	for len(keysOf(t, ctx, c)) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("keys %q long after the only slot's TTL", keysOf(t, ctx, c))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.RefreshSlot(ctx, "sem", 1, "a", time.Minute); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("RefreshSlot after expiry: %v, want ErrNotHeld", err)
	}
	if got := keysOf(t, ctx, c); !slices.Equal(got, []string{redis.FenceKey("", "sem")}) {
		t.Errorf("RefreshSlot after expiry left %q", got)
	}
}

func TestSlotLimitMismatch(t *testing.T) {
	d, _, ctx := slotDriver(t)
	mustSlot(t, ctx, d, slotReq("sem", "a", 3), 1)
	var le *redis.LimitError
	_, err := d.AcquireSlot(ctx, slotReq("sem", "b", 2), 0, 0)
	if !errors.As(err, &le) || le.Limit != 2 || le.Holders != 3 {
		t.Fatalf("AcquireSlot with limit 2 while 3 holds: %v, want a LimitError 2 vs 3", err)
	}
	if errors.Is(err, backends.ErrInvalid) {
		t.Error("one node's LimitError matches ErrInvalid; only a quorum's mismatch may")
	}
	// The lock of the key is refused beside the slots (its SET NX meets
	// the marker) and says why when withdrawn.
	if _, err := d.AcquireSeeded(ctx, backends.Request{Key: "sem", Token: "l", TTL: time.Minute, Fence: true}, 0); !errors.Is(err, backends.ErrNotAcquired) {
		t.Errorf("lock beside a semaphore's slots: %v, want ErrNotAcquired", err)
	}
	if err := d.WithdrawLock(ctx, "sem", "l"); !errors.As(err, &le) || le.Limit != 1 || le.Holders != 3 {
		t.Errorf("WithdrawLock beside the slots: %v, want a LimitError 1 vs 3", err)
	}

	// A held lock refuses slots.
	if _, err := d.AcquireSeeded(ctx, backends.Request{Key: "lock", Token: "l", TTL: time.Minute, Fence: true}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.AcquireSlot(ctx, slotReq("lock", "b", 2), 0, 0); !errors.As(err, &le) || le.Holders != 1 {
		t.Errorf("AcquireSlot while the lock is held: %v, want a LimitError naming 1", err)
	}
	if err := d.WithdrawLock(ctx, "lock", "other"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("WithdrawLock of another token: %v, want ErrNotHeld", err)
	}
	if err := d.WithdrawLock(ctx, "lock", "l"); err != nil {
		t.Errorf("WithdrawLock of the holder: %v", err)
	}
	mustSlot(t, ctx, d, slotReq("lock", "b", 2), 0)
	holds, err := d.SlotHolds(ctx, "nothing")
	if err != nil || len(holds) != 0 {
		t.Errorf("SlotHolds of a free key: %v, %v", holds, err)
	}
}

func TestSlotInvalid(t *testing.T) {
	d, _, ctx := slotDriver(t)
	for _, tc := range []struct {
		name string
		req  backends.Request
		slot int
	}{
		{"limit 1", slotReq("k", "t", 1), 0},
		{"slot at the limit", slotReq("k", "t", 2), 2},
		{"negative slot", slotReq("k", "t", 2), -1},
		{"limit above MaxSlots", slotReq("k", "t", redis.MaxSlots+1), 0},
		{"empty token", slotReq("k", "", 2), 0},
		{"token with a newline", slotReq("k", "a\nb", 2), 0},
	} {
		if _, err := d.AcquireSlot(ctx, tc.req, tc.slot, 0); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := d.RefreshSlot(ctx, "k", redis.MaxSlots, "t", time.Second); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("RefreshSlot of slot MaxSlots: %v, want ErrInvalid", err)
	}
	_ = d.Close()
	if _, err := d.AcquireSlot(ctx, slotReq("k", "t", 2), 0, 0); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("AcquireSlot after Close: %v, want ErrClosed", err)
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
		acquire := map[string]func(key string) (backends.Grant, error){
			"lock": func(key string) (backends.Grant, error) {
				return d.AcquireSeeded(ctx, backends.Request{Key: key, Token: "t", TTL: time.Minute, Fence: true}, step)
			},
			"slot": func(key string) (backends.Grant, error) { return d.AcquireSlot(ctx, slotReq(key, "t", 2), 1, step) },
		}
		for kind, acquire := range acquire {
			key := fmt.Sprintf("%s-%v", kind, step)
			// Each key must seed a counter of its own: no earlier key of
			// the test may share its hash slot.
			if c.Exists(ctx, redis.FenceKey("", key)).Val() == 1 {
				t.Fatalf("%s shares its fence counter with an earlier key of the test: rename it", key)
			}
			before := serverMicros()
			g, err := acquire(key)
			if err != nil {
				t.Fatalf("%s, step %v: %v", kind, step, err)
			}
			after := serverMicros()
			seed := int64(g.Fence) - 1
			if seed%stepUS != 0 || seed > after || seed <= before-stepUS {
				t.Errorf("%s, step %v: counter seeded at %d, want a multiple of %d µs in (%d, %d]", kind, step, seed, stepUS, before-stepUS, after)
			}
			if err := c.Del(ctx, "dsync:{"+key+"}", "dsync:{"+key+"}:slot:1").Err(); err != nil {
				t.Fatal(err)
			}
			if g2, err := acquire(key); err != nil || g2.Fence != g.Fence+1 {
				t.Errorf("%s, step %v, again: fence %d, %v; want %d", kind, step, g2.Fence, err, g.Fence+1)
			}
		}
	}
}
