package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync/backends"
)

// TestEscapeNameInjective: distinct names give distinct keys, and no key
// has a "/" after the prefix, so no name nests under another.
func TestEscapeNameInjective(t *testing.T) {
	names := []string{"a", "a/b", "a%2Fb", "a%b", "a%252Fb", "%", "/", "//", "%2F", "a/", "/a", "a%", "%25"}
	seen := map[string]string{}
	for _, n := range names {
		e := escapeName(n)
		if prev, dup := seen[e]; dup {
			t.Errorf("%q and %q both escape to %q", prev, n, e)
		}
		seen[e] = n
		for i := range len(e) {
			if e[i] == '/' {
				t.Errorf("escapeName(%q) = %q contains /", n, e)
			}
		}
	}
}

func TestValueEncoding(t *testing.T) {
	for _, tc := range []struct {
		token string
		value []byte
	}{{"t", nil}, {"t", []byte("v")}, {"t", []byte("a\nb\n")}, {"tok", []byte("\n")}} {
		tok, v := decodeValue([]byte(encodeValue(tc.token, tc.value)))
		if tok != tc.token || string(v) != string(tc.value) {
			t.Errorf("round trip of %q %q = %q %q", tc.token, tc.value, tok, v)
		}
	}
	if tok, v := decodeValue([]byte("foreign")); tok != "foreign" || v != nil {
		t.Errorf("foreign value decoded as %q %q", tok, v)
	}
}

func TestRefusal(t *testing.T) {
	for _, err := range []error{
		rpctypes.ErrRequestTooLarge,
		rpctypes.ErrPermissionDenied,
		rpctypes.ErrEmptyKey,
		status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (70000 vs. 4096)"),
		fmt.Errorf("wrapped: %w", rpctypes.ErrRequestTooLarge),
	} {
		got := refusal(err)
		if !errors.Is(got, backends.ErrInvalid) || !errors.Is(got, err) {
			t.Errorf("refusal(%v) = %v, want ErrInvalid with the error kept", err, got)
		}
	}
	for _, err := range []error{
		nil,
		rpctypes.ErrTooManyRequests, // ResourceExhausted too, but a retry cures it
		rpctypes.ErrNoSpace,
		rpctypes.ErrLeaseNotFound,
		rpctypes.ErrNoLeader,
		context.DeadlineExceeded,
		status.Error(codes.Unavailable, "connection refused"),
	} {
		if got := refusal(err); got != err {
			t.Errorf("refusal(%v) = %v, want it as it is", err, got)
		}
	}
}

// TestLineCountKeptAcrossRegistration: a waiter's count of the waiters
// ahead of it, taken by its attempt, is brought up to date with the
// deletions the watch saw between the attempt's read and the waiter's
// registration (before, they were lost, and a waiter at the head that
// still counted one ahead was never woken: the whole line stalled until
// its retry timer); a newer look replaces the count it had; a look older
// than what the watch saw all of is not kept, and the waiter is woken to
// look again; a deletion delivered twice counts once.
func TestLineCountKeptAcrossRegistration(t *testing.T) {
	var n notifier
	n.init(nil)
	w := &keyWatch{n: &n, key: "k", subs: map[*subscription]struct{}{}, start: make(chan int64, 1)}
	n.watches["k"] = w
	s := &subscription{w: w, c: make(chan backends.Notice, 1)}
	w.subs[s] = struct{}{}
	woken := func() bool {
		select {
		case <-s.c:
			return true
		default:
			return false
		}
	}
	lp := linePrefix("k")
	me := lp + "m"
	w.delsFrom = 5 // the watch was created at revision 4

	w.passed(lp+"a", 6) // between the attempt's read (5) and the registration
	x := &waiting{}
	n.inLine("k", me, x, 2, 5)
	if head, known := x.head(); head || !known || x.ahead != 1 {
		t.Fatalf("after one deletion past the look: ahead %d, known %v; want 1 ahead", x.ahead, known)
	}
	if woken() {
		t.Fatal("woken with a waiter still ahead")
	}
	w.passed(lp+"a", 6) // delivered again by a resumed watch
	w.passed(lp+"z", 7) // behind it
	if x.ahead != 1 || woken() {
		t.Fatalf("a repeated deletion, or one behind, counted: ahead %d", x.ahead)
	}
	w.passed(lp+"b", 8)
	if head, _ := x.head(); !head || !woken() {
		t.Fatalf("the last waiter ahead went: head %v, want the waiter at the head and woken", head)
	}

	// A newer look replaces the count, though the watch counted past it.
	n.inLine("k", me, x, 3, 8)
	if x.ahead != 3 || x.rev != 8 {
		t.Fatalf("a newer look left ahead %d at %d, want 3 at 8", x.ahead, x.rev)
	}
	// A look that the deletions seen reach the head from wakes it.
	w.passed(lp+"c", 9)
	w.passed(lp+"d", 10)
	n.inLine("k", me, x, 2, 8)
	if head, _ := x.head(); !head || !woken() {
		t.Fatalf("a look two deletions ago with two ahead: ahead %d, want the head, woken", x.ahead)
	}

	// A look from before what the watch saw all of (a compaction, or a
	// watch resumed from where the driver is) cannot be kept up.
	w.lostDelsBefore(20)
	n.inLine("k", me, x, 0, 15)
	if _, known := x.head(); known || !woken() {
		t.Fatalf("a look older than the watch's coverage kept (known %v), or not woken", known)
	}
	if !x.write(16) || x.write(15) {
		t.Fatal("a waiter whose count is lost should write after a release since its look, and only then")
	}
}
