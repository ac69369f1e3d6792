package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// Outage is one way to make the service under test unable to decide, for
// real: a server stopped, Redlock masters restarted into their quarantine,
// the link to etcd black-holed by a proxy (internal/testenv/faultproxy).
// It serves a service of its own, started by the backend's test, which
// the suite breaks once; the other checks never see it.
type Outage struct {
	// Name says what Cut does; it names the subtest ("server stopped").
	Name string
	// NewBackend returns a new client of the outage's service, as
	// Harness.NewBackend does of the main one. The suite opens its clients
	// before Cut, and closes them.
	NewBackend func(t testing.TB) *dsync.Backend
	// Cut makes the service unable to decide, and returns once the outage
	// is in force. It is called once; the service stays cut.
	Cut func(t testing.TB)
}

// outageDeadline is the deadline of the blocking calls of testOutage: it
// may end an attempt in flight (a black hole answers nothing before the
// backend's request timeout), which still counts as unavailable.
const outageDeadline = time.Second

// outageRelease bounds the clean-up releases of testOutage's clients.
const outageRelease = 200 * time.Millisecond

// runOutages runs testOutage for every Outage of the Harness.
func (s *suite) runOutages(t *testing.T) {
	if len(s.h.Outages) == 0 {
		t.Skip("the Harness gives no Outage (a backend in process cannot be made unavailable)")
	}
	for _, o := range s.h.Outages {
		t.Run(o.Name, func(t *testing.T) { s.testOutage(t, o) })
	}
}

// testOutage: a lock, a semaphore and an election are held on o's
// service. Another client's attempts on them are refused as taken
// (ErrNotAcquired, never ErrUnavailable), by TryAcquire and by a blocking
// call that ends on its deadline. Then the service is cut: the same
// attempts, and one on a free name, fail as unavailable (ErrUnavailable
// and ErrNotAcquired, nothing final), a blocking call also with its
// context's error.
func (s *suite) testOutage(t *testing.T, o Outage) {
	ctx := testutil.Context(t)
	open := func() *dsync.Backend {
		b := o.NewBackend(t)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	holderB, b := open(), open()
	key := testutil.UniqueKey(t)
	lockOpts := &locker.Options{TTL: s.electionTTL(), ReleaseTimeout: outageRelease}
	electOpts := &leader.Options{TTL: s.electionTTL(), ReleaseTimeout: outageRelease}

	// The holds are extended while the checks run (leadership is renewed).
	held := []dsync.Lease{testutil.MustAcquire(t, ctx, newLocker(t, holderB, key+"/lock", lockOpts))}
	l := newLocker(t, b, key+"/lock", lockOpts)
	free := newLocker(t, b, key+"/free", lockOpts)
	var sem *semaphore.Semaphore
	if lease.Driver(b).Capabilities().MaxLimit >= 2 {
		full := newSemaphore(t, holderB, key+"/sem", 2, &semaphore.Options{TTL: s.electionTTL(), ReleaseTimeout: outageRelease})
		for range 2 {
			p, err := full.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("semaphore TryAcquire: %v", err)
			}
			held = append(held, p)
		}
		sem = newSemaphore(t, b, key+"/sem", 2, &semaphore.Options{TTL: s.electionTTL(), ReleaseTimeout: outageRelease})
	}
	// Releasing ends the local leases and their extensions (and the
	// term's renewals), whether the cut service answers or not.
	for _, h := range held {
		h.AutoExtend()
		t.Cleanup(func() { _ = h.Release(context.WithoutCancel(ctx)) })
	}
	lead, err := newElection(t, holderB, key+"/elect", "a", electOpts).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign on a free election: %v", err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(ctx)) })
	e := newElection(t, b, key+"/elect", "b", electOpts)

	calls := func() map[string]func(context.Context) error {
		m := map[string]func(context.Context) error{
			"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx); return err },
			"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx); return err },
			"Campaign":   func(ctx context.Context) error { _, err := e.Campaign(ctx); return err },
		}
		if sem != nil {
			m["semaphore TryAcquire"] = func(ctx context.Context) error { _, err := sem.TryAcquire(ctx); return err }
			m["semaphore Acquire"] = func(ctx context.Context) error { _, err := sem.Acquire(ctx); return err }
		}
		return m
	}
	blocking := map[string]bool{"Acquire": true, "Campaign": true, "semaphore Acquire": true}
	run := func(name string, call func(context.Context) error) error {
		if !blocking[name] {
			return call(ctx)
		}
		dctx, cancel := context.WithTimeout(ctx, outageDeadline)
		defer cancel()
		err := call(dctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s ended by its deadline: %v, want context.DeadlineExceeded as well", name, err)
		}
		return err
	}

	for name, call := range calls() {
		err := run(name, call)
		if !errors.Is(err, dsync.ErrNotAcquired) || errors.Is(err, dsync.ErrUnavailable) {
			t.Errorf("%s on a name held by another client: %v, want ErrNotAcquired and not ErrUnavailable", name, err)
		}
	}

	o.Cut(t)
	all := calls()
	all["TryAcquire of a free name"] = func(ctx context.Context) error { _, err := free.TryAcquire(ctx); return err }
	for name, call := range all {
		err := run(name, call)
		if !errors.Is(err, dsync.ErrUnavailable) || !errors.Is(err, dsync.ErrNotAcquired) ||
			errors.Is(err, dsync.ErrInvalid) || errors.Is(err, dsync.ErrClosed) {
			t.Errorf("%s with the service cut (%s): %v, want ErrUnavailable and ErrNotAcquired, nothing final", name, o.Name, err)
		}
	}
}
