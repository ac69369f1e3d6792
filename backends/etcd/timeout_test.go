package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// TestRequestTimeout: with a context that has no deadline, every call on a
// cluster that stops answering returns within request_timeout, an attempt
// as an error matching ErrNotAcquired and a release as ErrNotHeld: the
// request timeout, not the caller, bounds it, and nothing hangs.
func TestRequestTimeout(t *testing.T) {
	c := etcdtest.Start(t, nil)
	p := faultproxy.Start(t, c.Endpoint(0))
	const timeout = 300 * time.Millisecond
	b, err := dsync.Open(testutil.Context(t), "etcd://"+p.Addr()+"?request_timeout=300ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l, err := locker.New(b, "held", &locker.Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	other, err := locker.New(b, "other", &locker.Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	lease, err := l.TryAcquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// The default request timeout is 5 s: anything well below it shows
	// that the URL's bound applied.
	const bound = timeout + 2*time.Second
	start := time.Now()
	_, err = other.TryAcquire(bg)
	if took := time.Since(start); took > bound {
		t.Errorf("TryAcquire on a silent cluster took %v, want about the request timeout %v", took, timeout)
	}
	if !errors.Is(err, dsync.ErrNotAcquired) {
		t.Errorf("TryAcquire on a silent cluster = %v, want ErrNotAcquired", err)
	}
	start = time.Now()
	err = lease.Release(bg)
	if took := time.Since(start); took > bound {
		t.Errorf("Release on a silent cluster took %v, want about the request timeout %v", took, timeout)
	}
	if !errors.Is(err, dsync.ErrNotHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release on a silent cluster = %v, want ErrNotHeld and DeadlineExceeded", err)
	}
}
