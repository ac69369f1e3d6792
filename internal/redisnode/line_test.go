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
	if ttl := c.PTTL(ctx, "dsync:{k}").Val(); ttl <= 0 || ttl > redisnode.HandOver {
		t.Errorf("the reservation lives %v, want at most the hand-over window %v", ttl, redisnode.HandOver)
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

// TestWaiterCallsByPlace: a waiter's attempt with no place in line leaves
// the line alone, fenced or not, in one call; refused, a second call puts
// it in line; with its place, one call again. An attempt with no waiter,
// refused, takes one call fenced (the script looks at the limit) and two
// unfenced (SET NX, then the limit), as the package doc says.
func TestWaiterCallsByPlace(t *testing.T) {
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
			t.Errorf("fence %v: a free lock took %d calls, want 1", fence, n)
		}
		before = calls()
		if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-w", TTL: time.Minute, Fence: fence, Waiter: w}); err != backends.ErrNotAcquired {
			t.Fatalf("fence %v: waiter on a held lock: %v", fence, err)
		}
		if n := calls() - before; n != 2 {
			t.Errorf("fence %v: a new waiter's refused attempt took %d calls, want 2", fence, n)
		}
		if c.ZScore(ctx, "dsync:{k}:line", w).Err() != nil {
			t.Fatalf("fence %v: the refused waiter is not in line", fence)
		}
		before = calls()
		if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-w", TTL: time.Minute, Fence: fence, Waiter: w}); err != backends.ErrNotAcquired {
			t.Fatalf("fence %v: waiter in line on a held lock: %v", fence, err)
		}
		if n := calls() - before; n != 1 {
			t.Errorf("fence %v: the attempt of a waiter in line took %d calls, want 1", fence, n)
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

// TestLineOutlivesItsWaiter: a line lasts LineKeep after a waiter joined
// it, not just the waiter's TTL, so that a release after the waiter's
// place lapsed (a waiter sleeping longer than its TTL) still tells it.
func TestLineOutlivesItsWaiter(t *testing.T) {
	d, c, ctx := slotDriver(t)
	lock := redisnode.Target{Key: "k"}
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "holder", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	const w = "0000000000000001-w"
	if _, err := d.Acquire(ctx, lock, redisnode.Hold{Token: "t-w", TTL: 50 * time.Millisecond, Waiter: w}); err != backends.ErrNotAcquired {
		t.Fatalf("waiter on a held lock: %v", err)
	}
	if ttl := c.PTTL(ctx, "dsync:{k}:line").Val(); ttl < redisnode.LineKeep-time.Minute {
		t.Errorf("the line lives %v after a waiter with a TTL of 50ms joined, want about %v", ttl, redisnode.LineKeep)
	}
	testutil.Eventually(t, 5*time.Second, "the waiter's place to lapse", func() bool {
		return c.Exists(ctx, "dsync:{k}:w:"+w).Val() == 0
	})
	ps := c.Subscribe(ctx, "dsync:{k}:released")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := d.Release(ctx, lock, "holder", true); err != nil {
		t.Fatal(err)
	}
	m, err := ps.ReceiveMessage(ctx)
	if err != nil || m.Payload != "released" {
		t.Fatalf("notice after the release: %v, %v; want \"released\"", m, err)
	}
	if n := c.Exists(ctx, "dsync:{k}", "dsync:{k}:line").Val(); n != 0 {
		t.Errorf("%d keys left: the lapsed place should leave the line with that release, and the lock be free", n)
	}
}
