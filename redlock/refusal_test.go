package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// TestRefusedForGood: when enough masters refuse a request for good that no
// quorum can form (2 of 3 deny the user scripts, which the fenced acquire
// needs), Acquire ends at once with ErrInvalid naming the refusal, instead
// of retrying until the caller's deadline; with one refusing master, the
// other two still grant.
func TestRefusedForGood(t *testing.T) {
	servers := agedServers(t, 3, nil)
	ctx := testutil.Context(t)
	for i, s := range servers {
		rules := []any{"ACL", "SETUSER", "dsync", "on", ">s3cret", "~*", "&*", "+@all"}
		if i > 0 {
			rules = append(rules, "-@scripting")
		}
		if err := s.NewClient(t).Do(ctx, rules...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := strings.Replace(redlockURL(servers, faultQuery("")), "redlock://", "redlock://dsync:s3cret@", 1)
	b, _ := openBackend(t, url)
	l, err := locker.New(b, "k", &locker.Options{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 10 * time.Second
	actx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(actx)
	if took := time.Since(start); took > deadline/2 {
		t.Errorf("Acquire took %v: the refusal was retried", took)
	}
	if !errors.Is(err, dsync.ErrInvalid) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Acquire with 2 of 3 masters refusing scripts = %v, want ErrInvalid naming NOPERM", err)
	}

	// One refusing master leaves a quorum.
	if err := servers[1].NewClient(t).Do(ctx, "ACL", "SETUSER", "dsync", "+@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(actx)
	if err != nil {
		t.Fatalf("Acquire with 1 of 3 masters refusing: %v", err)
	}
	_ = lease.Release(ctx)
}
