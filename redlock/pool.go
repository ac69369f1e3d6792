package redlock

import (
	"sync"
	"time"
)

// The driver's node requests run on workers, for speed only: a request
// runs on a worker that ran one before, rather than on a fresh goroutine.
// go-redis's call path is deep, and a fresh goroutine grows and copies its
// stack on every request; a worker has it already. BenchmarkWorkers
// compares them (the figures are in docs/performance.md).

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 5 * time.Second

// A spawner runs the driver's goroutines. Go runs f on a goroutine unless
// Stop has begun, and reports whether it did; Stop awaits every f started.
type spawner interface {
	Go(f func()) bool
	Stop()
}

// spawn runs f on a goroutine of the driver's, which Close awaits, unless
// Close has begun; it reports whether f was started.
func (d *driver) spawn(f func()) bool { return d.pool.Go(f) }

// workers is the driver's spawner: an idle worker takes f when there is
// one; each exits after workerIdle without work, or when Stop begins.
type workers struct {
	// mu orders every wg.Add before Stop's wg.Wait or after none: a
	// WaitGroup must not be added to from zero while it is waited on.
	mu       sync.Mutex
	stopping bool // protected by mu
	wg       sync.WaitGroup
	idle     chan func()   // unbuffered: Go hands f to a worker waiting here
	quit     chan struct{} // closed when Stop begins
}

func newWorkers() *workers {
	return &workers{idle: make(chan func()), quit: make(chan struct{})}
}

func (w *workers) Go(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return false
	}
	select {
	case w.idle <- f:
		return true
	default:
	}
	w.wg.Add(1)
	go w.work(f)
	return true
}

// work runs f, then the functions Go hands it, until none comes for
// workerIdle or Stop begins.
func (w *workers) work(f func()) {
	defer w.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // not kept alive while idle
		idle.Reset(workerIdle)
		select {
		case f = <-w.idle:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

func (w *workers) Stop() {
	w.mu.Lock()
	if !w.stopping {
		w.stopping = true
		close(w.quit)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
