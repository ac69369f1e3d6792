package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// noLine is a driver that keeps no line of waiters: it drops the Waiter of
// every attempt, so that the backend serves whoever comes first and only
// the process's own line can be fair.
type noLine struct{ backends.Driver }

func (d noLine) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	req.Waiter = ""
	return d.Driver.Acquire(ctx, req)
}

// TestLocalWaitersServedInTurn: goroutines of one process that share a
// Locker and ask again as soon as they release are served in turn, first
// come first served: a releaser queues behind those already waiting
// instead of winning the race it is best placed to win. Each one's number
// of acquisitions is within one of every other's, no two hold at once,
// and no wait is longer than the others' holds ahead of it. Time is
// synctest's, so every goroutine has joined the line before the first
// hold ends.
func TestLocalWaitersServedInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := testutil.NewBackend(t, noLine{testutil.MemoryDriver(t, nil)})
		l, err := locker.New(b, "k", &locker.Options{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		const goroutines, total = 8, 160
		const work = time.Millisecond
		var (
			done    atomic.Int32
			inside  atomic.Int32
			overlap atomic.Int32
			counts  [goroutines]int
			worst   [goroutines]time.Duration
			errs    = make(chan error, goroutines)
			wg      sync.WaitGroup
		)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < total {
					asked := time.Now()
					ls, err := l.Acquire(ctx)
					if err != nil {
						errs <- err
						return
					}
					worst[g] = max(worst[g], time.Since(asked))
					if inside.Add(1) != 1 {
						overlap.Add(1)
					}
					counts[g]++
					done.Add(1)
					time.Sleep(work)
					inside.Add(-1)
					if err := ls.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Acquire or Release: %v", err)
		}
		if n := overlap.Load(); n != 0 {
			t.Fatalf("%d overlapping holds", n)
		}
		lo, hi, wmax := counts[0], counts[0], time.Duration(0)
		for g := range goroutines {
			lo, hi, wmax = min(lo, counts[g]), max(hi, counts[g]), max(wmax, worst[g])
		}
		if hi-lo > 1 {
			t.Errorf("acquisitions per goroutine %v: not served in turn", counts)
		}
		if bound := (goroutines - 1) * work; wmax > bound {
			t.Errorf("worst wait %v, above the %d other goroutines' holds (%v)", wmax, goroutines-1, bound)
		}
	})
}
