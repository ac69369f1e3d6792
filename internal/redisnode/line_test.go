package redisnode_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/redisnode"
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
