package redisnode_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestReservationOnOneNode: a lock kept for a waiter counts as a lock
// for the limit checks, is no hold for Holder or Holds, and cannot be
// named by a token.
func TestReservationOnOneNode(t *testing.T) {
	d, c, ctx := slotDriver(t)
	lock := redisnode.Target{Key: "k"}
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	const w = "0000000000000001-w"
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-w", TTL: time.Minute, Waiter: w}); err != backends.ErrNotAcquired {
		t.Fatalf("waiter on a held lock: %v", err)
	}
	if err := d.Release(ctx, lock, "holder", true); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "dsync:{k}").Val(); v != "\r"+w {
		t.Fatalf("the released lock holds %q, want the reservation for %s", v, w)
	}
	if ttl := c.PTTL(ctx, "dsync:{k}").Val(); ttl <= 0 || ttl > backends.HandOver {
		t.Errorf("the reservation lives %v, want at most the hand-over window %v", ttl, backends.HandOver)
	}
	if _, err := d.Holder(ctx, "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Errorf("Holder of a reservation: %v, want ErrNotHeld", err)
	}
	if hs, err := d.Holds(ctx, "k"); err != nil || len(hs) != 0 {
		t.Errorf("Holds of a reservation = %+v, %v; want none", hs, err)
	}
	var le *redisnode.LimitError
	if _, err := d.Acquire(ctx, redisnode.Target{Key: "k", Slot: 0, Slots: 2}, redisnode.Hold{Token: "s", TTL: time.Minute}); !errors.As(err, &le) || le.Holders != 1 {
		t.Errorf("a slot on a reserved lock: %v, want a *LimitError with holders 1", err)
	}
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "\r" + w, TTL: time.Minute}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("a token starting with \\r: %v, want ErrInvalid", err)
	}
	if err := d.Leave(ctx, "k", ""); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Leave of no waiter: %v, want ErrInvalid", err)
	}
	if err := d.Leave(ctx, "k", w); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, "dsync:{k}", "dsync:{k}:line", "dsync:{k}:w:"+w).Val(); n != 0 {
		t.Errorf("%d keys left after the only waiter left", n)
	}
}

// TestOneCallPerAttempt: a waiter's attempt is one call, whether the lock
// is free, held, or held with the waiter in line, fenced or not, and it
// puts the waiter in line when refused. An attempt with no waiter, refused,
// takes one call fenced (the script looks at the limit) and two unfenced
// (SET NX, then the limit), as the package doc says.
func TestOneCallPerAttempt(t *testing.T) {
	d, c, ctx := slotDriver(t)
	// The commands the node sends, once the connection's handshake is done.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	c.AddHook(countHook{&sent})
	calls := func() int { return int(sent.Load()) }
	const w = "0000000000000001-w"
	for _, fence := range []bool{false, true} {
		lock := redisnode.Target{Key: "k"}
		before := calls()
		if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "holder", TTL: time.Minute, Fence: fence, Waiter: "0000000000000000-h"}); err != nil {
			t.Fatal(err)
		}
		if n := calls() - before; n != 1 {
			t.Errorf("fence %v: a waiter on a free lock took %d calls, want 1", fence, n)
		}
		for _, what := range []string{"a new waiter", "a waiter in line"} {
			before = calls()
			if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-w", TTL: time.Minute, Fence: fence, Waiter: w}); err != backends.ErrNotAcquired {
				t.Fatalf("fence %v: %s on a held lock: %v", fence, what, err)
			}
			if n := calls() - before; n != 1 {
				t.Errorf("fence %v: %s's refused attempt took %d calls, want 1", fence, what, n)
			}
			if c.ZScore(ctx, "dsync:{k}:line", w).Err() != nil {
				t.Fatalf("fence %v: %s, refused, is not in line", fence, what)
			}
		}
		before = calls()
		if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-x", TTL: time.Minute, Fence: fence}); err != backends.ErrNotAcquired {
			t.Fatalf("fence %v: no waiter, on a held lock: %v", fence, err)
		}
		want := 2
		if fence {
			want = 1
		}
		if n := calls() - before; n != want {
			t.Errorf("fence %v: a refused attempt with no waiter took %d calls, want %d", fence, n, want)
		}
		if err := d.Leave(ctx, "k", w); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, lock, "holder", true); err != nil {
			t.Fatal(err)
		}
	}
}

// countHook counts the commands a client sends, but those refused with
// NOSCRIPT (a script's first run, sent again as EVAL).
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.n.Add(1)
		}
		return err
	}
}

func (countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestLineLapsesWithItsWaiters: a line lives as long as its longest-lived
// place and no longer: after its waiters stop attempting, nothing of it is
// left once their TTLs pass, and the release that comes after publishes
// no notice (nobody waits) and leaves no key behind.
func TestLineLapsesWithItsWaiters(t *testing.T) {
	d, c, ctx := slotDriver(t)
	lock := redisnode.Target{Key: "k"}
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waiters := []struct {
		name string
		ttl  time.Duration
	}{{"0000000000000001-w", 300 * time.Millisecond}, {"0000000000000002-w", 100 * time.Millisecond}}
	for _, w := range waiters {
		if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-" + w.name, TTL: w.ttl, Waiter: w.name}); err != backends.ErrNotAcquired {
			t.Fatalf("waiter on a held lock: %v", err)
		}
	}
	if ttl := c.PTTL(ctx, "dsync:{k}:line").Val(); ttl <= 100*time.Millisecond || ttl > 300*time.Millisecond {
		t.Errorf("the line lives %v, want the longest TTL of its places, 300ms", ttl)
	}
	testutil.Eventually(t, 5*time.Second, "the line to lapse with its places", func() bool {
		return c.Exists(ctx, "dsync:{k}:line", "dsync:{k}:w:"+waiters[0].name, "dsync:{k}:w:"+waiters[1].name).Val() == 0
	})
	ps := c.Subscribe(ctx, "dsync:{k}:released")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := d.Release(ctx, lock, "holder", true); err != nil {
		t.Fatal(err)
	}
	if keys := c.Keys(ctx, "dsync:{k}*").Val(); len(keys) != 0 {
		t.Errorf("keys left after the release: %q, want none", keys)
	}
	// A notice after the release would come before the answer to a PING on
	// the same connection.
	if err := ps.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := ps.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, pong := m.(*goredis.Pong); !pong {
		t.Errorf("after the line lapsed, the release sent %v, want no notice", m)
	}
}
