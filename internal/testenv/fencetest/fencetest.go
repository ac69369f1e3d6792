// Package fencetest is the conformance suite of the fence guards: every
// guard runs it against its real store (Redis, etcd, PostgreSQL, SQLite),
// through an adapter that says how to write, fail and read there.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/locker"
)

// Store is a guarded store under test. Names are unique to each test.
type Store interface {
	// Write sets the value of name to value and appends token to name's
	// log, both in one write guarded by token under the fence of name. It
	// returns the guard's error.
	Write(ctx context.Context, name string, token uint64, value string) error
	// WriteThenFail is a guarded write of name with token that fails after
	// the guard's check, on an error of the store (a failed statement, a
	// failed command), before anything is written. It returns that error.
	WriteThenFail(ctx context.Context, name string, token uint64) error
	// Read returns the value of name ("" if never written) and the tokens
	// of its log, in the order the store accepted them.
	Read(ctx context.Context, name string) (string, []uint64, error)
	// Fence returns the largest token the fence of name accepted, or 0.
	Fence(ctx context.Context, name string) (uint64, error)
	// MaxToken is the largest token the guard takes.
	MaxToken() uint64
}

// Run runs the suite, each test on a store of its own from newStore.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s Store)
	}{
		{"StaleRefused", testStaleRefused},
		{"EqualAndLargerPass", testEqualAndLargerPass},
		{"FailAfterCheck", testFailAfterCheck},
		{"Concurrent", testConcurrent},
		{"TokenRange", testTokenRange},
		{"BadInput", testBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// want checks what the store holds for name.
func want(t *testing.T, s Store, name, value string, log []uint64, fenced uint64) {
	t.Helper()
	v, l, err := s.Read(t.Context(), name)
	if err != nil {
		t.Fatalf("Read(%q): %v", name, err)
	}
	if v != value || !slices.Equal(l, log) {
		t.Errorf("%q holds %q, log %v; want %q, log %v", name, v, l, value, log)
	}
	f, err := s.Fence(t.Context(), name)
	if err != nil {
		t.Fatalf("Fence(%q): %v", name, err)
	}
	if f != fenced {
		t.Errorf("fence of %q: %d, want %d", name, f, fenced)
	}
}

func write(t *testing.T, s Store, name string, token uint64, value string) {
	t.Helper()
	if err := s.Write(t.Context(), name, token, value); err != nil {
		t.Fatalf("Write(%q, token %d): %v", name, token, err)
	}
}

func wantStale(t *testing.T, err error, token uint64) {
	t.Helper()
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("write with stale token %d: %v, want ErrStale", token, err)
	}
}

// testStaleRefused: a token below the fence is refused with nothing
// written, and the error says both tokens.
func testStaleRefused(t *testing.T, s Store) {
	write(t, s, "ledger", 5, "new")
	err := s.Write(t.Context(), "ledger", 3, "late")
	wantStale(t, err, 3)
	t.Logf("stale write: %v", err)
	if msg := err.Error(); !containsAll(msg, `"ledger"`, "3", "5") {
		t.Errorf("stale error %q does not name the name and both tokens", msg)
	}
	want(t, s, "ledger", "new", []uint64{5}, 5)
	// Another name has a fence of its own.
	write(t, s, "other", 1, "x")
	want(t, s, "other", "x", []uint64{1}, 1)
}

// testEqualAndLargerPass: the fence's own token passes again, a larger one
// raises it.
func testEqualAndLargerPass(t *testing.T, s Store) {
	write(t, s, "n", 5, "a")
	write(t, s, "n", 5, "b")
	write(t, s, "n", 6, "c")
	want(t, s, "n", "c", []uint64{5, 5, 6}, 6)
}

// testFailAfterCheck: a write that fails after passing the check leaves
// the fence where it was, so a smaller token than the failed one passes.
func testFailAfterCheck(t *testing.T, s Store) {
	write(t, s, "n", 5, "a")
	err := s.WriteThenFail(t.Context(), "n", 7)
	if err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("failing write: %v, want the store's error", err)
	}
	want(t, s, "n", "a", []uint64{5}, 5)
	write(t, s, "n", 6, "b")
	want(t, s, "n", "b", []uint64{5, 6}, 6)
	// On a name never written too.
	if err := s.WriteThenFail(t.Context(), "fresh", 7); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("failing write: %v, want the store's error", err)
	}
	want(t, s, "fresh", "", nil, 0)
}

// testConcurrent: writers with interleaved tokens race on one name (writer
// w of n writes tokens w+1, w+1+n, w+1+2n, ...); the store accepts writes
// in an order of non-decreasing tokens and ends at the largest.
func testConcurrent(t *testing.T, s Store) {
	const writers, each = 8, 25
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // protects accepted and errs
		accepted int
		errs     []error
	)
	for w := range writers {
		wg.Go(func() {
			for k := range each {
				token := uint64(k*writers + w + 1)
				err := s.Write(t.Context(), "hot", token, strconv.FormatUint(token, 10))
				mu.Lock()
				switch {
				case err == nil:
					accepted++
				case !errors.Is(err, fence.ErrStale):
					errs = append(errs, fmt.Errorf("token %d: %w", token, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	top := uint64(writers * each)
	v, log, err := s.Read(t.Context(), "hot")
	if err != nil {
		t.Fatal(err)
	}
	if v != strconv.FormatUint(top, 10) {
		t.Errorf("value %q, want %d, the largest token", v, top)
	}
	if len(log) != accepted {
		t.Errorf("log of %d writes, %d accepted", len(log), accepted)
	}
	for i := 1; i < len(log); i++ {
		if log[i] < log[i-1] {
			t.Errorf("write with token %d accepted after one with %d", log[i], log[i-1])
		}
	}
	if f, err := s.Fence(t.Context(), "hot"); err != nil || f != top {
		t.Errorf("fence %d (%v), want %d", f, err, top)
	}
	t.Logf("%d of %d writes accepted", accepted, writers*each)
}

// testTokenRange: tokens compare as numbers up to the guard's largest,
// beyond 2^53 (where a double would round) and across a change of digit
// count; a token above the largest is refused as invalid.
func testTokenRange(t *testing.T, s Store) {
	max := s.MaxToken()
	ladder := []uint64{9, 10, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}
	if max > math.MaxInt64 {
		ladder = append(ladder, math.MaxInt64+1, max-1, max)
	}
	for i, tok := range ladder {
		write(t, s, "range", tok, strconv.FormatUint(tok, 10))
		if i > 0 {
			below := ladder[i-1]
			wantStale(t, s.Write(t.Context(), "range", below, "stale"), below)
		}
	}
	want(t, s, "range", strconv.FormatUint(max, 10), ladder, max)
	if max < math.MaxUint64 {
		err := s.Write(t.Context(), "above", max+1, "x")
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("token %d, above %d: %v, want ErrInvalid", max+1, max, err)
		}
		t.Logf("token above the range: %v", err)
		want(t, s, "above", "", nil, 0)
	}
}

// testBadInput: an empty name and token 0 are refused before any write.
func testBadInput(t *testing.T, s Store) {
	for _, c := range []struct {
		name  string
		token uint64
	}{{"", 1}, {"n", 0}} {
		err := s.Write(t.Context(), c.name, c.token, "x")
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("Write(%q, %d): %v, want ErrInvalid", c.name, c.token, err)
		}
	}
	want(t, s, "n", "", nil, 0)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// LateHolder runs a lock on b through s: a first holder takes the lock
// with ttl and writes, then stops renewing it (as a process paused past its
// TTL would) until its lease is lost; a second holder takes the lock over
// and writes; the first one's late write must be refused, with the second
// one's value kept.
func LateHolder(t *testing.T, s Store, b *dsync.Backend, ttl time.Duration) {
	t.Helper()
	ctx := t.Context()
	name := "late-holder"
	l, err := locker.New(b, name, &locker.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(t, s, name, first.Token(), "first")
	<-first.Done() // never extended: lost when its validity runs out
	second, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Release(context.WithoutCancel(ctx)) })
	write(t, s, name, second.Token(), "second")
	err = s.Write(ctx, name, first.Token(), "late")
	wantStale(t, err, first.Token())
	t.Logf("tokens %d then %d; the late write: %v", first.Token(), second.Token(), err)
	want(t, s, name, "second", []uint64{first.Token(), second.Token()}, second.Token())
}
