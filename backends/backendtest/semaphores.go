package backendtest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/semaphore"
)

// runSemaphores runs the semaphore checks (the bad-input table has the
// semaphores' rows).
func (s *suite) runSemaphores(t *testing.T) {
	if caps := lease.Driver(s.backend(t)).Capabilities(); caps.MaxLimit < 2 {
		t.Skipf("the %s driver offers locks only (MaxLimit %d)", caps.Name, caps.MaxLimit)
	}
	runChecks(t, []check{
		{"PlainContention", s.testSemPlainContention},
		{"AdmitsSize", s.testSemAdmitsSize},
		{"ExpiryFrees", s.testSemExpiryFrees},
		{"SizeMismatch", s.testSemSizeMismatch},
		{"ReleaseWakesWaiter", s.testSemWake},
		{"CancelLeavesNothingHeld", s.testSemCancel},
		{"Do", s.testSemDo},
		{"Hammer", s.testSemHammer},
		{"ProcessHammer", s.testSemProcessHammer},
		{"KilledHolderFrees", s.testSemKilledHolder},
	})
}

func newSemaphore(t testing.TB, b *dsync.Backend, name string, size int, opts *semaphore.Options) *semaphore.Semaphore {
	t.Helper()
	sem, err := semaphore.New(b, name, size, opts)
	if err != nil {
		t.Fatalf("semaphore.New(%q, %d): %v", name, size, err)
	}
	return sem
}

func wantFull(t testing.TB, ctx context.Context, sem dsync.Semaphore) {
	t.Helper()
	p, err := sem.TryAcquire(ctx)
	if err == nil {
		_ = p.Release(ctx)
		t.Fatalf("TryAcquire succeeded on a semaphore whose %d permits are taken", sem.Size())
	}
	if !errors.Is(err, dsync.ErrNotAcquired) || errors.Is(err, dsync.ErrUnavailable) {
		t.Fatalf("TryAcquire on a full semaphore: %v, want ErrNotAcquired and not ErrUnavailable", err)
	}
}

// testSemPlainContention: the driver answers an attempt on a full
// semaphore with the bare ErrNotAcquired, as the SPI says, and leaves
// nothing behind.
func (s *suite) testSemPlainContention(t *testing.T) {
	ctx := testutil.Context(t)
	d := lease.Driver(s.backend(t))
	req := backends.Request{Key: testutil.UniqueKey(t), TTL: s.driverTTL(d), Limit: 2}
	for _, tok := range []string{"holder-1", "holder-2"} {
		req.Token = tok
		if _, err := d.Acquire(ctx, req); err != nil {
			t.Fatalf("Acquire %s of 2: %v", tok, err)
		}
		t.Cleanup(func() { _ = d.Release(context.WithoutCancel(ctx), req.Key, tok) })
	}
	req.Token = "contender"
	if _, err := d.Acquire(ctx, req); err != backends.ErrNotAcquired {
		t.Fatalf("Acquire on a full semaphore: %v, want the bare backends.ErrNotAcquired", err)
	}
	if err := d.Release(ctx, req.Key, "contender"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release of the refused token: %v, want ErrNotHeld (nothing left behind)", err)
	}
}

// testSemAdmitsSize fills a semaphore from several clients: exactly Size
// permits are granted, a release frees exactly one, and fencing tokens grow
// over all permits.
func (s *suite) testSemAdmitsSize(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	const size = 3
	var sems []*semaphore.Semaphore
	for range size + 1 {
		sems = append(sems, newSemaphore(t, s.backend(t), name, size, nil))
	}
	var permits []dsync.Lease
	var last uint64
	for i := range size {
		p := testutil.MustAcquire(t, ctx, sems[i])
		if tok := p.Token(); tok != 0 {
			if tok <= last {
				t.Fatalf("permit %d: token %d not above %d", i, tok, last)
			}
			last = tok
		}
		permits = append(permits, p)
	}
	wantFull(t, ctx, sems[size])
	if err := permits[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := testutil.MustAcquire(t, ctx, sems[size])
	if tok := p.Token(); tok != 0 && tok <= last {
		t.Fatalf("permit after a release: token %d not above %d", tok, last)
	}
	wantFull(t, ctx, sems[1])
	for _, q := range []dsync.Lease{permits[0], permits[2], p} {
		if err := q.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := permits[1].Release(ctx); !errors.Is(err, dsync.ErrNotHeld) {
		t.Fatalf("second release of a permit: %v, want ErrNotHeld", err)
	}
	for i := range size {
		permits[i] = testutil.MustAcquire(t, ctx, sems[i])
	}
	for _, q := range permits {
		_ = q.Release(ctx)
	}
}

// testSemExpiryFrees: permits that are not extended expire, are reported
// lost, and free their slots.
func (s *suite) testSemExpiryFrees(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	ttl := s.h.ShortTTL
	sem := newSemaphore(t, s.backend(t), name, 2, &semaphore.Options{TTL: ttl})
	a, b := testutil.MustAcquire(t, ctx, sem), testutil.MustAcquire(t, ctx, sem)
	other := newSemaphore(t, s.backend(t), name, 2, &semaphore.Options{TTL: ttl})
	wantFull(t, ctx, other)
	for _, p := range []dsync.Lease{a, b} {
		select {
		case <-p.Done():
			if !errors.Is(p.Err(), dsync.ErrLeaseLost) {
				t.Fatalf("expired permit: Err %v, want ErrLeaseLost", p.Err())
			}
		case <-time.After(ttl + 10*time.Second):
			t.Fatal("permit not reported lost after its TTL")
		}
	}
	var p dsync.Lease
	testutil.Eventually(t, 3*ttl+10*time.Second, "a permit after the others expired", func() bool {
		var err error
		p, err = other.TryAcquire(ctx)
		return err == nil
	})
	_ = p.Release(ctx)
}

// testSemSizeMismatch: users of one name that disagree on its size get a
// clear error (not a wait) while holders of the other size are live; once
// they are gone, the new size holds.
func (s *suite) testSemSizeMismatch(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	three := newSemaphore(t, s.backend(t), name, 3, nil)
	two := newSemaphore(t, s.backend(t), name, 2, nil)
	p := testutil.MustAcquire(t, ctx, three)
	_, err := two.Acquire(ctx) // blocking: must not wait out ctx
	var inv *dsync.InvalidError
	if !errors.As(err, &inv) || inv.Field != "size" {
		t.Fatalf("Acquire with size 2 while size 3 is held: %v, want an InvalidError on size", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Acquire waited for its context instead of failing at once")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := testutil.MustAcquire(t, ctx, two)
	if _, err := three.TryAcquire(ctx); !errors.As(err, &inv) {
		t.Fatalf("TryAcquire with size 3 while size 2 is held: %v, want an InvalidError", err)
	}
	_ = q.Release(ctx)
}

func (s *suite) testSemWake(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	b := s.backend(t)
	if !lease.Driver(b).Capabilities().ReleaseNotices {
		t.Skipf("the %s driver offers no release wake-ups", lease.Driver(b).Capabilities().Name)
	}
	full := newSemaphore(t, s.backend(t), name, 2, nil)
	held := []dsync.Lease{testutil.MustAcquire(t, ctx, full), testutil.MustAcquire(t, ctx, full)}
	const retryDelay = 30 * time.Second
	p := &signalPolicy{delay: retryDelay, waiting: make(chan struct{}, 1)}
	waiter := newSemaphore(t, b, name, 2, &semaphore.Options{Retry: p})
	got := make(chan error, 1)
	go func() {
		q, err := waiter.Acquire(ctx)
		if err == nil {
			err = q.Release(ctx)
		}
		got <- err
	}()
	<-p.waiting // the waiter failed once and is sleeping
	released := time.Now()
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		t.Logf("waiter got a permit %v after the release", time.Since(released))
	case <-time.After(retryDelay / 3):
		t.Fatalf("waiter not woken by the release within %v (its retry delay is %v)", retryDelay/3, retryDelay)
	}
	_ = held[1].Release(ctx)
}

// testSemCancel: a waiter that gives up on a full semaphore leaves nothing
// held: after one release, exactly one permit is free.
func (s *suite) testSemCancel(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	sem := newSemaphore(t, s.backend(t), name, 2, nil)
	held := []dsync.Lease{testutil.MustAcquire(t, ctx, sem), testutil.MustAcquire(t, ctx, sem)}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := newSemaphore(t, s.backend(t), name, 2, nil).Acquire(wctx)
	cancel()
	if !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a full semaphore with a deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := testutil.MustAcquire(t, ctx, sem)
	wantFull(t, ctx, sem)
	_ = p.Release(ctx)
	_ = held[1].Release(ctx)
}

func (s *suite) testSemDo(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	sem := newSemaphore(t, s.backend(t), name, 1, nil)
	other := newSemaphore(t, s.backend(t), name, 1, nil)
	ran := false
	err := dsync.Do(ctx, sem, func(ctx context.Context) error {
		ran = true
		wantFull(t, ctx, other)
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: ran %v, err %v", ran, err)
	}
	p := testutil.MustAcquire(t, ctx, other) // Do released its permit
	_ = p.Release(ctx)
}

// testSemHammer: many goroutines over several clients; the number inside
// the critical section never exceeds Size.
func (s *suite) testSemHammer(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	const size, clients, perClient, rounds = 3, 3, 3, 10
	var (
		inside, most atomic.Int32
		count        atomic.Int32
		wg           sync.WaitGroup
		errs         = make(chan error, clients*perClient)
	)
	for range clients {
		sem := newSemaphore(t, s.backend(t), name, size, &semaphore.Options{TTL: 10 * time.Second})
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					p, err := sem.Acquire(ctx)
					if err != nil {
						errs <- err
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond) // the work, so that holders overlap
					count.Add(1)
					inside.Add(-1)
					if err := p.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("hammer: %v", err)
	}
	if m := most.Load(); m > size {
		t.Fatalf("%d holders at once in a semaphore of size %d", m, size)
	}
	if n := count.Load(); n != clients*perClient*rounds {
		t.Fatalf("%d critical sections ran, want %d", n, clients*perClient*rounds)
	}
	t.Logf("at most %d holders at once (size %d)", most.Load(), size)
}

func init() {
	// sem-cycle: acquire, hold for "hold", release; "rounds" times.
	registerWorker("sem-cycle", func(ctx context.Context, b *dsync.Backend, a workerArgs, emit proc.Emit) error {
		sem, err := semaphore.New(b, a.Str("name"), a.Int("size"), nil)
		if err != nil {
			return err
		}
		for range a.Int("rounds") {
			p, err := sem.Acquire(ctx)
			if err != nil {
				return err
			}
			emit("acquired", strconv.FormatUint(p.Token(), 10))
			time.Sleep(a.Duration("hold"))
			emit("releasing")
			if err := p.Release(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	// sem-hold: acquire one permit, keep it (auto-extended) until killed.
	registerWorker("sem-hold", func(ctx context.Context, b *dsync.Backend, a workerArgs, emit proc.Emit) error {
		sem, err := semaphore.New(b, a.Str("name"), a.Int("size"), &semaphore.Options{TTL: a.Duration("ttl"), AutoExtend: true})
		if err != nil {
			return err
		}
		p, err := sem.Acquire(ctx)
		if err != nil {
			return err
		}
		emit("acquired", strconv.FormatUint(p.Token(), 10))
		select {
		case <-ctx.Done():
			return p.Release(context.Background())
		case <-p.Done():
			return p.Err()
		}
	})
}

// testSemProcessHammer: worker processes contend for a semaphore; their
// critical sections, stamped on the machine's monotonic clock, never
// number more than Size at once.
func (s *suite) testSemProcessHammer(t *testing.T) {
	s.needCrossProcess(t)
	name := testutil.UniqueKey(t)
	const size, workers, rounds = 2, 4, 12
	var ws []*worker
	for range workers {
		ws = append(ws, s.startWorker(t, "sem-cycle", map[string]string{
			"name": name, "size": strconv.Itoa(size), "rounds": strconv.Itoa(rounds), "hold": "3ms",
		}))
	}
	var evs []event
	for _, w := range ws {
		evs = append(evs, w.Wait(t, 2*time.Minute)...)
	}
	most, sections := mostInside(evs)
	if most > size {
		t.Fatalf("%d processes held permits at once in a semaphore of size %d", most, size)
	}
	if sections != workers*rounds {
		t.Fatalf("%d critical sections reported, want %d", sections, workers*rounds)
	}
	t.Logf("%d processes, %d sections, at most %d holders at once (size %d)", workers, sections, most, size)
}

// testSemKilledHolder: a holder process killed with SIGKILL (no release)
// gives its permit back within its TTL, while a live holder's permit,
// auto-extended, stays taken past its TTL.
func (s *suite) testSemKilledHolder(t *testing.T) {
	s.needCrossProcess(t)
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	ttl := max(s.h.ShortTTL, time.Second)
	args := map[string]string{"name": name, "size": "2", "ttl": ttl.String()}
	doomed, alive := s.startWorker(t, "sem-hold", args), s.startWorker(t, "sem-hold", args)
	for _, w := range []*worker{doomed, alive} {
		w.Expect(t, "ready", 30*time.Second)
		w.Expect(t, "acquired", 30*time.Second)
	}
	sem := newSemaphore(t, s.backend(t), name, 2, &semaphore.Options{TTL: ttl})
	wantFull(t, ctx, sem)
	doomed.Kill(t)
	killed := time.Now()
	var p dsync.Lease
	testutil.Eventually(t, 3*ttl+10*time.Second, "the killed holder's permit back", func() bool {
		var err error
		p, err = sem.TryAcquire(ctx)
		return err == nil
	})
	t.Logf("permit back %v after the kill (ttl %v)", time.Since(killed), ttl)
	p.AutoExtend() // it fills the semaphore with the live holder's below
	defer p.Release(ctx)
	// The live holder auto-extends: its permit outlives its TTL.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		wantFull(t, ctx, sem)
		time.Sleep(ttl / 4)
	}
	alive.Signal(t, syscall.SIGTERM)
	alive.Wait(t, 30*time.Second)
}

// mostInside replays the "acquired" and "releasing" events of workers in
// the order of their stamps and returns the largest number of workers
// inside at once, and the number of sections.
func mostInside(evs []event) (most, sections int) {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.At, b.At) })
	inside := map[int]bool{}
	for _, ev := range evs {
		switch ev.Name {
		case "acquired":
			inside[ev.Worker] = true
			most = max(most, len(inside))
			sections++
		case "releasing":
			delete(inside, ev.Worker)
		}
	}
	return most, sections
}
