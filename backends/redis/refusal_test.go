package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// TestRefusedForGood: a request the server refuses for good (an ACL user
// without the right to run scripts, which the fenced acquire needs) ends
// Acquire at once with ErrInvalid and the server's NOPERM, instead of being
// retried like a network error until the caller's deadline.
func TestRefusedForGood(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx := testutil.Context(t)
	if err := srv.NewClient(t).Do(ctx, "ACL", "SETUSER", "noscripts", "on", ">s3cret", "~*", "&*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := dsync.Open(ctx, "redis://noscripts:s3cret@"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l, err := locker.New(b, "k", nil)
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
		t.Fatalf("Acquire as a user who may not run scripts = %v, want ErrInvalid naming NOPERM", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}
