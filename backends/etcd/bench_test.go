package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	mix "github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// The benchmarks compare dsync's etcd locks with etcd's own
// concurrency.Mutex on the same embedded member, in one run: with fsync, as
// a production etcd runs, and without (etcd's unsafe-no-fsync), where CPU
// rather than the disk bounds a write.

const benchTTL = 10 * time.Second

// benchServer starts a member and returns a client of it.
func benchServer(b *testing.B, fsync bool) (*etcdtest.Cluster, *clientv3.Client) {
	b.Helper()
	c := etcdtest.Start(b, &etcdtest.Options{Fsync: fsync})
	return c, c.Client(b)
}

func benchBackend(b *testing.B, c *etcdtest.Cluster, cli *clientv3.Client) *dsync.Backend {
	b.Helper()
	d, err := etcd.NewDriver(cli, &etcd.Options{MinTTL: c.MinLeaseTTL()})
	if err != nil {
		b.Fatal(err)
	}
	backend, err := dsync.NewBackend(d, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	return backend
}

// BenchmarkLockCycleRatio interleaves one uncontended Acquire+Release
// through the locker (the blocking path applications use, fencing on; its
// first attempt goes out before any watch is set up) with one
// Lock+Unlock of a concurrency.Mutex whose session was created beforehand,
// alternating which goes first, so that both see the same machine and disk
// noise, and reports each one's mean and their ratio. Per cycle each makes
// two calls, both raft writes: the locker its acquiring transaction and its
// releasing one (guarded by the hold's create revision), the Mutex its
// transaction and a plain delete. The locker reuses one lease from cycle to
// cycle and renews it, in parallel with an acquisition, once per 1% of the
// TTL (every 100 ms here); the Mutex's session renews its lease every
// third of the TTL, in the background.
func BenchmarkLockCycleRatio(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			c, cli := benchServer(b, fsync)
			ctx := context.Background()
			l, err := locker.New(benchBackend(b, c, cli), "ratio", &locker.Options{TTL: benchTTL})
			if err != nil {
				b.Fatal(err)
			}
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			m := concurrency.NewMutex(s, "/mutex/ratio")
			dsyncCycle := func() {
				lease, err := l.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			mutexCycle := func() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			interleave(b, "dsync", dsyncCycle, "mutex", mutexCycle)
		})
	}
}

// BenchmarkGuardedDeleteCost measures, with raw client calls, what the
// token guard on a release costs by itself: a cycle of the same acquiring
// transaction followed by a release guarded by the key's create revision
// (dsync's), against one followed by a plain Delete (concurrency.Mutex's
// Unlock), interleaved. The ratio is the part of BenchmarkLockCycleRatio
// that safety costs: a plain Delete removes whatever holds the key, a newer
// hold included.
func BenchmarkGuardedDeleteCost(b *testing.B) {
	_, cli := benchServer(b, false)
	ctx := context.Background()
	lg, err := cli.Grant(ctx, int64(benchTTL/time.Second))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	acquire := func(k string) int64 {
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, "v", clientv3.WithLease(lg.ID))).
			Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			b.Fatal(err)
		}
		return r.Header.Revision
	}
	guarded := func() {
		n++
		k := fmt.Sprintf("/guarded/%d", n)
		rev := acquire(k)
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", rev)).Then(clientv3.OpDelete(k)).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	plain := func() {
		n++
		k := fmt.Sprintf("/plain/%d", n)
		acquire(k)
		if _, err := cli.Delete(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, "guarded", guarded, "plain", plain)
}

// interleave measures x and y side by side (internal/testenv/interleave) and
// reports their ratio x/y, and the ratio of their medians (ratio-p50).
func interleave(b *testing.B, xName string, x func(), yName string, y func()) {
	r := mix.Run(b, nil, mix.Case{Name: xName, Run: x}, mix.Case{Name: yName, Run: y})
	mix.ReportRatio(b, "ratio", r[xName], r[yName])
}

// BenchmarkSemaphoreCycleRatio interleaves, through the portable types,
// one acquire+release of a free permit of a semaphore of 3 with one
// uncontended acquire+release of a lock, on the same member and driver,
// and reports their ratio (semaphore/lock). A permit's transaction also
// reads the semaphore's first 3 keys, sorted by create revision; both
// cycles make two raft writes.
func BenchmarkSemaphoreCycleRatio(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			c, cli := benchServer(b, fsync)
			ctx := context.Background()
			backend := benchBackend(b, c, cli)
			l, err := locker.New(backend, "lock", &locker.Options{TTL: benchTTL})
			if err != nil {
				b.Fatal(err)
			}
			sem, err := semaphore.New(backend, "sem", 3, &semaphore.Options{TTL: benchTTL})
			if err != nil {
				b.Fatal(err)
			}
			semCycle := func() {
				p, err := sem.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			lockCycle := func() {
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			interleave(b, "sem", semCycle, "lock", lockCycle)
		})
	}
}

// contenders is the number of goroutines on one key in
// BenchmarkContended.
const contenders = 8

// BenchmarkContended runs 8 goroutines that lock and unlock one key as fast
// as they can, until they have made b.N acquisitions between them, and
// reports acquisitions per second and the spread between goroutines:
//
//   - dsync/1-backend: the 8 goroutines share one backend (one process);
//     they line up locally and one of them contends on etcd at a time.
//   - dsync/8-backends: each goroutine has its own client and driver, as 8
//     processes would; contention is settled by etcd alone, and waiters wake
//     on a watch of the key's deletion.
//   - mutex: each goroutine has its own session and concurrency.Mutex on
//     one client (sessions created beforehand).
//   - dsync/uncontended: one goroutine alone, for reference: every
//     acquisition costs at least two raft writes in a row (acquire, then
//     release), contended or not, which bounds any lock's rate.
func BenchmarkContended(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			c, cli := benchServer(b, fsync)
			b.Run("dsync/uncontended", func(b *testing.B) {
				l, err := locker.New(benchBackend(b, c, cli), "alone", &locker.Options{TTL: benchTTL})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				start := time.Now()
				for b.Loop() {
					if err := lockerCycle(l)(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "acq/s")
			})
			b.Run("dsync/1-backend", func(b *testing.B) {
				l, err := locker.New(benchBackend(b, c, cli), "one", &locker.Options{TTL: benchTTL})
				if err != nil {
					b.Fatal(err)
				}
				contend(b, func(int) func(context.Context) error { return lockerCycle(l) })
			})
			b.Run("dsync/8-backends", func(b *testing.B) {
				var lockers []*locker.Locker
				for range contenders {
					l, err := locker.New(benchBackend(b, c, c.Client(b)), "eight", &locker.Options{TTL: benchTTL})
					if err != nil {
						b.Fatal(err)
					}
					lockers = append(lockers, l)
				}
				contend(b, func(g int) func(context.Context) error { return lockerCycle(lockers[g]) })
			})
			b.Run("mutex", func(b *testing.B) {
				var mutexes []*concurrency.Mutex
				for range contenders {
					s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTTL/time.Second)))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = s.Close() })
					mutexes = append(mutexes, concurrency.NewMutex(s, "/mutex/contended"))
				}
				contend(b, func(g int) func(context.Context) error {
					m := mutexes[g]
					return func(ctx context.Context) error {
						if err := m.Lock(ctx); err != nil {
							return err
						}
						return m.Unlock(ctx)
					}
				})
			})
		})
	}
}

func lockerCycle(l *locker.Locker) func(context.Context) error {
	return func(ctx context.Context) error {
		lease, err := l.Acquire(ctx)
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
}

// contend runs cycle(g) in contenders goroutines until b.N cycles are done
// between them, and reports the rate and each goroutine's share.
func contend(b *testing.B, cycle func(g int) func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		left   atomic.Int64
		counts [contenders]int
		wg     sync.WaitGroup
		errs   = make(chan error, contenders)
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for g := range contenders {
		run := cycle(g)
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := run(ctx); err != nil {
					errs <- err
					return
				}
				counts[g]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	lo, hi := counts[0], counts[0]
	for _, n := range counts {
		lo, hi = min(lo, n), max(hi, n)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	if b.N >= 10*contenders {
		b.ReportMetric(float64(lo)/float64(hi), "min/max-share")
	}
}

// BenchmarkRefreshRatio interleaves one Refresh of a held lock through the
// driver (what every extension costs) with one raw clientv3 KeepAliveOnce
// of a lease, the floor of any lease renewal, and reports their ratio.
func BenchmarkRefreshRatio(b *testing.B) {
	c, cli := benchServer(b, false)
	ctx := context.Background()
	d, err := etcd.NewDriver(cli, &etcd.Options{MinTTL: c.MinLeaseTTL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	if _, err := d.Acquire(ctx, backends.Request{Key: "refresh", Token: "t", TTL: benchTTL}); err != nil {
		b.Fatal(err)
	}
	lg, err := cli.Grant(ctx, int64(benchTTL/time.Second))
	if err != nil {
		b.Fatal(err)
	}
	refresh := func() {
		if err := d.Refresh(ctx, "refresh", "t", benchTTL); err != nil {
			b.Fatal(err)
		}
	}
	keepAlive := func() {
		if _, err := cli.KeepAliveOnce(ctx, lg.ID); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, "refresh", refresh, "keepalive", keepAlive)
}

// BenchmarkLeaseReuse interleaves the same work on two drivers over the
// same member, and reports their ratios (reuse/grant): one whose lease pool
// (leasepool.go) works, and one whose pool is filled to its bounds
// beforehand (MaxIdle idle leases of another TTL, MaxHeld holds kept), so
// that it grants a lease for every attempt, leaves it to expire after the
// release, and remembers no hold: the driver without its pool. The work:
//
//   - cycle: an uncontended Acquire+Release through the locker;
//   - refresh: a Refresh, which on a hold the driver remembers checks its
//     key while the renewal is in flight instead of reading the hold first.
func BenchmarkLeaseReuse(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			c, cli := benchServer(b, fsync)
			ctx := context.Background()
			driver := func() *etcd.Driver {
				d, err := etcd.NewDriver(cli, &etcd.Options{MinTTL: c.MinLeaseTTL()})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = d.Close() })
				return d
			}
			reuse, grant := driver(), driver()
			fillPool(b, grant)
			b.Run("cycle", func(b *testing.B) {
				cycle := func(d *etcd.Driver, name string) func() {
					backend, err := dsync.NewBackend(d, nil)
					if err != nil {
						b.Fatal(err)
					}
					l, err := locker.New(backend, name, &locker.Options{TTL: benchTTL})
					if err != nil {
						b.Fatal(err)
					}
					run := lockerCycle(l)
					return func() {
						if err := run(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
				interleave(b, "reuse", cycle(reuse, "cycle-reuse"), "grant", cycle(grant, "cycle-grant"))
			})
			runs := 0 // a new hold to refresh on every run of the sub-benchmark
			b.Run("refresh", func(b *testing.B) {
				runs++
				refresh := func(d *etcd.Driver, key string) func() {
					key = fmt.Sprintf("%s-%d", key, runs)
					if _, err := d.Acquire(ctx, backends.Request{Key: key, Token: "t", TTL: benchTTL}); err != nil {
						b.Fatal(err)
					}
					return func() {
						if err := d.Refresh(ctx, key, "t", benchTTL); err != nil {
							b.Fatal(err)
						}
					}
				}
				interleave(b, "reuse", refresh(reuse, "refresh-reuse"), "grant", refresh(grant, "refresh-grant"))
			})
			if !etcd.PoolFull(grant) {
				b.Fatal("the reference driver's lease pool is no longer full: it may have reused leases")
			}
		})
	}
}

// fillPool fills d's lease pool to its bounds with leases whose TTLs
// (whole hours, unlike benchTTL) no benchmark asks for and that outlive it:
// etcd.MaxIdle leases released (idle), then etcd.MaxHeld holds kept.
func fillPool(b *testing.B, d *etcd.Driver) {
	b.Helper()
	ctx := context.Background()
	acquire := func(prefix string, n int, ttl time.Duration) []string {
		keys := make([]string, n)
		errs := make(chan error, n)
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", prefix, i)
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, err := d.Acquire(ctx, backends.Request{Key: keys[i], Token: "t", TTL: ttl}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("filling the lease pool: %v", err)
		}
		return keys
	}
	for _, k := range acquire("fill-idle", etcd.MaxIdle, 2*time.Hour) {
		if err := d.Release(ctx, k, "t"); err != nil {
			b.Fatalf("filling the lease pool: %v", err)
		}
	}
	acquire("fill-held", etcd.MaxHeld, time.Hour)
	if !etcd.PoolFull(d) {
		b.Fatal("the lease pool is not full after filling it")
	}
}

// BenchmarkKeepAliveStream shows what the driver's renewer (renew.go), a
// LeaseKeepAlive stream kept open, saves over clientv3's KeepAliveOnce,
// which opens a stream per renewal, run on a goroutine so that the caller
// can work meanwhile, as the driver does. Both renew a lease of their own,
// granted beforehand, on the same client, interleaved, and each renewal is
// in flight beside the call the driver makes meanwhile:
//
//   - refresh: a read of a key, as Refresh does for a hold it remembers;
//   - cycle: the write of a key on the lease, then the key's deletion, as
//     an Acquire on a reused lease and its Release do.
//
// It reports their ratios (once/stream); the renewer stays while one of
// them is at least 1.1.
func BenchmarkKeepAliveStream(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", fsync), func(b *testing.B) {
			c, cli := benchServer(b, fsync)
			ctx := context.Background()
			d, err := etcd.NewDriver(cli, &etcd.Options{MinTTL: c.MinLeaseTTL()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			lease := func() clientv3.LeaseID {
				lg, err := cli.Grant(ctx, int64(benchTTL/time.Second))
				if err != nil {
					b.Fatal(err)
				}
				return lg.ID
			}
			stream := func(id clientv3.LeaseID) func() error { return etcd.SendRenewal(ctx, d, id) }
			once := func(id clientv3.LeaseID) func() error {
				done := make(chan error, 1)
				go func() {
					_, err := cli.KeepAliveOnce(ctx, id)
					done <- err
				}()
				return func() error { return <-done }
			}
			b.Run("refresh", func(b *testing.B) {
				refresh := func(send func(clientv3.LeaseID) func() error, key string) func() {
					id := lease()
					if _, err := cli.Put(ctx, key, "t", clientv3.WithLease(id)); err != nil {
						b.Fatal(err)
					}
					return func() {
						wait := send(id)
						if _, err := cli.Get(ctx, key); err != nil {
							b.Fatal(err)
						}
						if err := wait(); err != nil {
							b.Fatal(err)
						}
					}
				}
				interleave(b, "once", refresh(once, "/ka/refresh-once"), "stream", refresh(stream, "/ka/refresh-stream"))
			})
			b.Run("cycle", func(b *testing.B) {
				cycle := func(send func(clientv3.LeaseID) func() error, key string) func() {
					id := lease()
					return func() {
						wait := send(id)
						_, err := cli.Txn(ctx).
							If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
							Then(clientv3.OpPut(key, "t", clientv3.WithLease(id))).
							Commit()
						if err != nil {
							b.Fatal(err)
						}
						if err := wait(); err != nil {
							b.Fatal(err)
						}
						if _, err := cli.Delete(ctx, key); err != nil {
							b.Fatal(err)
						}
					}
				}
				interleave(b, "once", cycle(once, "/ka/cycle-once"), "stream", cycle(stream, "/ka/cycle-stream"))
			})
		})
	}
}
