// Package testutil holds the small helpers that dsync's tests share. Every
// helper takes the test first, marks itself a helper, and fails the test
// with t.Fatalf on its own goroutine only: never call one from another
// goroutine.
package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/hook"
)

// Timeout bounds the context of Context.
const Timeout = 60 * time.Second

// Context returns a context that ends after Timeout or with the test.
// Inside a testing/synctest bubble, call it inside the bubble.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 5ms until it holds, and fails the test,
// saying what was awaited, if timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// MustGrant makes one attempt with d and fails the test unless it is
// granted.
func MustGrant(t testing.TB, ctx context.Context, d backends.Driver, r backends.Request) backends.Grant {
	t.Helper()
	g, err := d.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("%s: %v, want a grant", describe(r), err)
	}
	return g
}

// WantNotAcquired makes one attempt with d and fails the test unless it
// meets plain contention: the bare backends.ErrNotAcquired, as the SPI
// answers it (a wrapped one means an unknown outcome).
func WantNotAcquired(t testing.TB, ctx context.Context, d backends.Driver, r backends.Request) {
	t.Helper()
	if _, err := d.Acquire(ctx, r); err != backends.ErrNotAcquired {
		t.Fatalf("%s = %v, want the bare ErrNotAcquired", describe(r), err)
	}
}

// describe names an attempt for the messages of MustGrant and
// WantNotAcquired.
func describe(r backends.Request) string {
	s := fmt.Sprintf("Acquire(%q, token %q", r.Key, r.Token)
	if r.Limit > 1 {
		s += fmt.Sprintf(", limit %d", r.Limit)
	}
	if r.Waiter != "" {
		s += fmt.Sprintf(", waiter %q", r.Waiter)
	}
	return s + ")"
}

// UniqueKey returns a key that no other test, run or process uses: the
// test's name and 48 random bits.
func UniqueKey(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return t.Name() + "/" + hex.EncodeToString(b[:])
}

// Open opens url (its backend's package imported by the test), closed at
// the end of the test; a failure fails the test.
func Open(t testing.TB, url string) *dsync.Backend {
	t.Helper()
	b, err := dsync.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// NewBackend wraps d in a backend closed at the end of the test.
func NewBackend(t testing.TB, d backends.Driver) *dsync.Backend {
	t.Helper()
	b, err := dsync.NewBackend(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Memory returns a memory backend on opts (nil: a fresh private store),
// closed at the end of the test.
func Memory(t testing.TB, opts *memory.Options) *dsync.Backend {
	t.Helper()
	b, err := memory.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// MemoryDriver returns the driver of a memory backend on opts (see
// Memory), for the tests that wrap a driver or drive the SPI directly.
// Its backend is closed at the end of the test, and with it the driver.
func MemoryDriver(t testing.TB, opts *memory.Options) backends.Driver {
	t.Helper()
	return hook.Driver(Memory(t, opts))
}

// MustAcquire makes one attempt on l (TryAcquire) and fails the test
// unless it obtains the lease.
func MustAcquire(t testing.TB, ctx context.Context, l dsync.Locker) dsync.Lease {
	t.Helper()
	ls, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return ls
}

// WantLocked makes one attempt on l (TryAcquire) and fails the test
// unless it is refused with an error matching dsync.ErrNotAcquired, as it
// is while the lock is held, by anyone, l included (a lease obtained is
// released first).
func WantLocked(t testing.TB, ctx context.Context, l dsync.Locker) {
	t.Helper()
	ls, err := l.TryAcquire(ctx)
	if err == nil {
		_ = ls.Release(ctx)
		t.Fatal("TryAcquire succeeded on a held lock")
	}
	if !errors.Is(err, dsync.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held lock: %v, want ErrNotAcquired", err)
	}
}
