package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync-dev/dsync"
)

// lockTimeout bounds every blocking lock call of a slice beyond its end, so
// that a stuck library fails the slice instead of hanging the run.
const lockTimeout = 10 * time.Second

// CycleSample is one slice of lock+unlock cycles of one target.
type CycleSample struct {
	Cycles  int     `json:"cycles"`
	Seconds float64 `json:"seconds"`
	MeanUs  float64 `json:"mean_us"` // elapsed per cycle and goroutine: the cost of one cycle
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
	Errors  int     `json:"errors"` // failed lock or unlock calls (the goroutine went on)
}

// PerSecond is the slice's rate of cycles, over all goroutines.
func (s CycleSample) PerSecond() float64 { return float64(s.Cycles) / s.Seconds }

// ContSample is one slice of goroutines contending for one key (or for the
// permits of one semaphore).
type ContSample struct {
	Seconds      float64 `json:"seconds"`
	Acquisitions int     `json:"acquisitions"` // obtained before the slice's end
	Handoffs     int     `json:"handoffs"`     // acquisitions by another goroutine than the last holder
	HandoffP50Us float64 `json:"handoff_p50_us"`
	HandoffP99Us float64 `json:"handoff_p99_us"`
	WorstWaitMs  float64 `json:"worst_wait_ms"` // longest wait, counting a wait still pending at the end up to the end
	PerGoroutine []int   `json:"per_goroutine"`
	GiveUps      int     `json:"give_ups"`   // blocking calls the library's own retry policy ended; asked again
	MaxInside    int     `json:"max_inside"` // most holders inside at once
	Violations   int     `json:"violations"` // entries that made more than the capacity inside
	Errors       int     `json:"errors"`     // failed lock or unlock calls (the goroutine went on)
}

// Min and Max are the fewest and most acquisitions of one goroutine.
func (s ContSample) Min() int { return slices.Min(s.PerGoroutine) }
func (s ContSample) Max() int { return slices.Max(s.PerGoroutine) }

// maxErrors is how many failed calls a slice tolerates before it fails.
const maxErrors = 50

// errTally counts the failed calls of a slice: a library's error under load
// (a Redlock node timing out, say) is counted and the goroutine goes on; an
// error no retry can cure, or too many, fails the slice.
type errTally struct {
	mu    sync.Mutex // protects the fields below
	n     int
	fatal error
}

// add counts err and reports whether the goroutine should stop.
func (e *errTally) add(ctx context.Context, err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.fatal == nil && (ctx.Err() != nil || e.n > maxErrors ||
		errors.Is(err, dsync.ErrInvalid) || errors.Is(err, dsync.ErrUnsupported) || errors.Is(err, dsync.ErrClosed)) {
		e.fatal = fmt.Errorf("%w (%d failed calls in the slice)", err, e.n)
	}
	return e.fatal != nil
}

func (e *errTally) stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal != nil
}

var keySeq atomic.Int64 // makes every key of a run unique

func nextKey(kind string) string { return fmt.Sprintf("bench:%s:%d", kind, keySeq.Add(1)) }

// runCycles runs n goroutines of lock+unlock cycles on t for d, each cycle
// on the key keyOf returns (called once per cycle), and records each
// cycle's latency.
func runCycles(ctx context.Context, t *target, n int, d time.Duration, keyOf func(g int) string) (CycleSample, error) {
	workers, err := t.workerSet(ctx, n)
	if err != nil {
		return CycleSample{}, err
	}
	var (
		mu   sync.Mutex // protects lats
		lats []time.Duration
		errs errTally
		wg   sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	lctx, cancel := context.WithDeadline(ctx, end.Add(lockTimeout))
	defer cancel()
	for g, w := range workers {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) && !errs.stopped() {
				key := keyOf(g)
				t0 := time.Now()
				unlock, err := w.lock(lctx, key)
				if err == nil {
					err = unlock(lctx)
				}
				if err != nil {
					if errs.add(lctx, err) {
						break
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			lats = append(lats, mine...)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if errs.fatal != nil {
		return CycleSample{}, errs.fatal
	}
	if len(lats) == 0 {
		return CycleSample{}, errors.New("no cycle completed")
	}
	slices.Sort(lats)
	return CycleSample{
		Cycles:  len(lats),
		Seconds: elapsed.Seconds(),
		MeanUs:  micros(elapsed) * float64(n) / float64(len(lats)),
		P50Us:   micros(percentile(lats, 0.50)),
		P99Us:   micros(percentile(lats, 0.99)),
		Errors:  errs.n,
	}, nil
}

// runInterleaved runs lock+unlock cycles of the targets ts on one
// goroutine, one cycle of each in turn (the order rotated every turn), each
// on a fresh key, for d in all, and records each cycle's latency. Every
// target meets the same moments of machine noise, so ratios between them
// compare like for like, where slices one after the other would differ by
// whatever the machine did in between. It returns the sample of each
// target that completed cycles, and the error of each that failed.
func runInterleaved(ctx context.Context, ts []*target, d time.Duration) (map[string]CycleSample, map[string]error) {
	type run struct {
		t     *target
		w     worker
		lats  []time.Duration
		spent time.Duration // in its cycles, failed ones included
		errs  errTally
	}
	failed := map[string]error{}
	var runs []*run
	for _, t := range ts {
		ws, err := t.workerSet(ctx, 1)
		if err != nil {
			failed[t.id()] = err
			continue
		}
		runs = append(runs, &run{t: t, w: ws[0]})
	}
	end := time.Now().Add(d)
	lctx, cancel := context.WithDeadline(ctx, end.Add(lockTimeout))
	defer cancel()
	for turn := 0; time.Now().Before(end); turn++ {
		active := 0
		for i := range runs {
			r := runs[(turn+i)%len(runs)]
			if r.errs.stopped() {
				continue
			}
			active++
			t0 := time.Now()
			unlock, err := r.w.lock(lctx, nextKey("u"))
			if err == nil {
				err = unlock(lctx)
			}
			took := time.Since(t0)
			r.spent += took
			if err != nil {
				r.errs.add(lctx, err)
				continue
			}
			r.lats = append(r.lats, took)
		}
		if active == 0 {
			break
		}
	}
	out := map[string]CycleSample{}
	for _, r := range runs {
		switch {
		case r.errs.fatal != nil:
			failed[r.t.id()] = r.errs.fatal
		case len(r.lats) == 0:
			failed[r.t.id()] = errors.New("no cycle completed")
		default:
			slices.Sort(r.lats)
			out[r.t.id()] = CycleSample{
				Cycles:  len(r.lats),
				Seconds: r.spent.Seconds(),
				MeanUs:  micros(r.spent) / float64(len(r.lats)),
				P50Us:   micros(percentile(r.lats, 0.50)),
				P99Us:   micros(percentile(r.lats, 0.99)),
				Errors:  r.errs.n,
			}
		}
	}
	return out, failed
}

// runContended runs n goroutines that lock key on t over and over for d,
// each staying inside for work, at most capacity of them at once: busy
// (a loop, as CPU-bound work would) or asleep (as a holder waiting on I/O
// would: more busy holders than CPUs would measure the scheduler instead). It counts acquisitions obtained before
// the end (later ones are released at once and not counted), handoffs and
// their latency (from the previous holder leaving the critical section,
// before its unlock call, to the next goroutine's lock returning), the
// longest wait, each goroutine's acquisitions, and entries that made more
// than capacity holders inside at once.
func runContended(ctx context.Context, t *target, n, capacity int, key string, work time.Duration, busy bool, d time.Duration) (ContSample, error) {
	workers, err := t.workerSet(ctx, n)
	if err != nil {
		return ContSample{}, err
	}
	var (
		mu        sync.Mutex // protects the fields below
		s         = ContSample{PerGoroutine: make([]int, n)}
		handoffs  []time.Duration
		worstWait time.Duration
		lastOwner = -1
		released  time.Time

		errs   errTally
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	lctx, cancel := context.WithDeadline(ctx, end.Add(lockTimeout))
	defer cancel()
	for g, w := range workers {
		wg.Go(func() {
			for time.Now().Before(end) && !errs.stopped() {
				asked := time.Now()
				unlock, err := w.lock(lctx, key)
				for errors.Is(err, errGaveUp) {
					mu.Lock()
					s.GiveUps++
					mu.Unlock()
					unlock, err = w.lock(lctx, key)
				}
				if err != nil {
					if errs.add(lctx, err) {
						return
					}
					continue
				}
				got := time.Now()
				in := int(inside.Add(1))
				mu.Lock()
				if in > capacity {
					s.Violations++
				}
				s.MaxInside = max(s.MaxInside, in)
				if !got.Before(end) {
					worstWait = max(worstWait, end.Sub(asked))
					mu.Unlock()
					inside.Add(-1)
					if err := unlock(lctx); err != nil {
						errs.add(lctx, err)
					}
					return
				}
				s.Acquisitions++
				s.PerGoroutine[g]++
				worstWait = max(worstWait, got.Sub(asked))
				if lastOwner >= 0 && lastOwner != g {
					s.Handoffs++
					handoffs = append(handoffs, got.Sub(released))
				}
				mu.Unlock()
				if busy {
					spin(work)
				} else {
					time.Sleep(work)
				}
				mu.Lock()
				lastOwner, released = g, time.Now()
				mu.Unlock()
				inside.Add(-1)
				if err := unlock(lctx); err != nil && errs.add(lctx, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	if errs.fatal != nil {
		return ContSample{}, errs.fatal
	}
	slices.Sort(handoffs)
	s.Errors = errs.n
	s.Seconds = d.Seconds()
	s.HandoffP50Us = micros(percentile(handoffs, 0.50))
	s.HandoffP99Us = micros(percentile(handoffs, 0.99))
	s.WorstWaitMs = micros(worstWait) / 1000
	return s, nil
}

// spin busy-waits for d: a sleep would round 100 µs up to the timer's
// resolution.
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// percentile of sorted samples, by nearest rank; zero without samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
