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
