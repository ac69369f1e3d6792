package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// TestLineViewHeir: the release watch's view of a lock names the first
// waiter in line when the lock is released, and the next one when the
// heir leaves while the lock is free; the heir's acquisition (its key
// deleted as the lock key is put) and a waiter joining behind wake nobody.
func TestLineViewHeir(t *testing.T) {
	const lk = "k"
	lp := linePrefix(lk)
	kv := func(k string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(k)} }
	put := func(k string) *clientv3.Event { return &clientv3.Event{Type: mvccpb.PUT, Kv: kv(k)} }
	del := func(k string) *clientv3.Event { return &clientv3.Event{Type: mvccpb.DELETE, Kv: kv(k)} }

	var v lineView
	if v.apply(lk, []*clientv3.Event{del(lk)}) || v.heir() != "" {
		t.Fatal("a view never read names an heir")
	}
	v.reset(lk, []*mvccpb.KeyValue{kv(lk), kv(lp + "b"), kv(lp + "d")})
	for _, step := range []struct {
		evs  []*clientv3.Event
		wake bool
		heir string
	}{
		{[]*clientv3.Event{put(lp + "c")}, false, "b"},          // joins behind
		{[]*clientv3.Event{put(lp + "a")}, false, "a"},          // ahead, while held
		{[]*clientv3.Event{del(lk)}, true, "a"},                 // released
		{[]*clientv3.Event{put(lp + "a")}, false, "a"},          // the heir's refused attempt
		{[]*clientv3.Event{del(lp + "a")}, true, "b"},           // the heir leaves: the next one's turn
		{[]*clientv3.Event{put(lk), del(lp + "b")}, false, "c"}, // the heir takes it
		{[]*clientv3.Event{del(lp + "c")}, false, "d"},          // a waiter leaves while held
		{[]*clientv3.Event{del(lk)}, true, "d"},
		{[]*clientv3.Event{put(lk), del(lp + "d")}, false, ""},
		{[]*clientv3.Event{del(lk)}, true, ""}, // free for anyone
	} {
		if wake := v.apply(lk, step.evs); wake != step.wake || v.heir() != step.heir {
			t.Fatalf("after %v: wake %v, heir %q; want %v, %q", step.evs, wake, v.heir(), step.wake, step.heir)
		}
	}
	v.forget()
	if v.apply(lk, []*clientv3.Event{put(lp + "e"), del(lk)}) || v.heir() != "" {
		t.Fatal("a forgotten view names an heir")
	}
}
