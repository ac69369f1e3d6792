package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// TestLine walks a lock's line on a manual clock: refused waiters keep a
// place for their TTL, a release keeps the lock for the first live waiter
// for HandOver (refusing a lone attempt and a later waiter), a lapsed
// place or reservation no longer holds anybody up, and Leave passes a
// reservation on.
func TestLine(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	const key = "k"
	try := func(token, waiter string, ttl time.Duration) error {
		_, err := d.Acquire(ctx, backends.Request{Key: key, Token: token, TTL: ttl, Waiter: waiter})
		return err
	}
	mustGet := func(token, waiter string) {
		t.Helper()
		if err := try(token, waiter, time.Minute); err != nil {
			t.Fatalf("%s (waiter %q): %v, want the lock", token, waiter, err)
		}
	}
	mustMiss := func(token, waiter string, ttl time.Duration) {
		t.Helper()
		if err := try(token, waiter, ttl); err != backends.ErrNotAcquired {
			t.Fatalf("%s (waiter %q): %v, want the bare ErrNotAcquired", token, waiter, err)
		}
	}
	release := func(token string) {
		t.Helper()
		if err := d.Release(ctx, key, token); err != nil {
			t.Fatalf("release %s: %v", token, err)
		}
	}

	mustGet("h1", "")
	mustMiss("c1", "w3", time.Minute)
	mustMiss("b1", "w2", time.Second) // its place lapses first
	mustMiss("a1", "w1", time.Minute)
	release("h1")
	mustMiss("lone", "", time.Minute) // kept for w1
	mustMiss("c2", "w3", time.Minute)
	mustGet("a2", "w1")
	if _, err := d.Holder(ctx, key); err != nil {
		t.Fatalf("Holder: %v", err)
	}

	clk.Advance(2 * time.Second) // w2's place has lapsed; w3 refreshed its own
	release("a2")
	mustMiss("b2", "w2", time.Minute) // rejoins, behind w3's kept lock
	if err := d.Leave(ctx, key, "w3"); err != nil {
		t.Fatal(err)
	}
	mustGet("b3", "w2") // the lock kept for w3 passed to w2

	release("b3")
	clk.Advance(backends.HandOver) // nobody waits: free for all at once
	if _, err := d.Holder(ctx, key); err != backends.ErrNotHeld {
		t.Fatalf("Holder of a free key: %v, want ErrNotHeld", err)
	}
	mustGet("lone2", "")
	release("lone2")
	mustGet("x", "w9") // nobody else waits
}

// TestLapsedHeirPassesInLine: when the heir of a release lets its window
// lapse, the free lock goes to the next live waiter in line, not to a
// waiter behind it that comes first (it is kept for the one ahead, and the
// later one stays in line), while a lone attempt, with no place, may
// still take a free lock.
func TestLapsedHeirPassesInLine(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	const key = "k"
	try := func(token, waiter string) error {
		_, err := d.Acquire(ctx, backends.Request{Key: key, Token: token, TTL: time.Minute, Waiter: waiter})
		return err
	}
	if err := try("h", ""); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		if err := try("t-"+w, w); err != backends.ErrNotAcquired {
			t.Fatalf("%s while held: %v", w, err)
		}
	}
	if err := d.Release(ctx, key, "h"); err != nil { // kept for w1
		t.Fatal(err)
	}
	clk.Advance(backends.HandOver) // w1 never came
	sub, err := d.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := try("t3", "w3"); err != backends.ErrNotAcquired {
		t.Fatalf("w3, behind a live w2, after w1's window lapsed: %v, want ErrNotAcquired", err)
	}
	select {
	case <-sub.C(): // w2's client is woken for the lock kept for it
	default:
		t.Fatal("the lock kept for w2 woke nobody")
	}
	if err := try("lone", ""); err != backends.ErrNotAcquired {
		t.Fatalf("a lone attempt while the lock is kept for w2: %v", err)
	}
	if err := try("t2", "w2"); err != nil {
		t.Fatalf("w2 in its turn: %v", err)
	}
	if err := d.Release(ctx, key, "t2"); err != nil { // kept for w3
		t.Fatal(err)
	}
	if err := try("t3b", "w3"); err != nil {
		t.Fatalf("w3 in its turn: %v", err)
	}
	if err := d.Release(ctx, key, "t3b"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(backends.HandOver)
	if err := try("lone2", ""); err != nil {
		t.Fatalf("a lone attempt on a free lock: %v", err)
	}
}
