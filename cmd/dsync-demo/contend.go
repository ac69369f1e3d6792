package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
)

type hold struct {
	worker             int
	token              uint64
	acquired, released time.Duration // since the demo's start, on the monotonic clock
	waited             time.Duration
}

type demoResult struct {
	holds      []hold
	maxInside  int32
	violations []string
}

// contend runs the workers and records every hold on one clock; each
// acquisition and release is an event of the story (shown with -v).
func contend(ctx context.Context, l acquirer, what string, cfg demoConfig, s *story) (*demoResult, error) {
	var (
		inside   atomic.Int32
		mu       sync.Mutex // protects res and firstErr
		res      = &demoResult{}
		wg       sync.WaitGroup
		firstErr error
	)
	for w := 1; w <= cfg.workers; w++ {
		wg.Go(func() {
			for range cfg.round {
				asked := s.since()
				lease, err := l.Acquire(ctx)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				h := hold{worker: w, token: lease.Token(), acquired: s.since()}
				h.waited = h.acquired - asked
				n := inside.Add(1)
				mu.Lock()
				res.maxInside = max(res.maxInside, n)
				mu.Unlock()
				s.event("worker-%d  acquired %s  token %-4d (waited %v, %d held)", w, what, h.token, h.waited.Round(time.Millisecond), n)

				select {
				case <-time.After(cfg.work):
				case <-lease.Done():
				}

				inside.Add(-1)
				h.released = s.since()
				lost := lease.Err()
				s.event("worker-%d  releases", w)
				relErr := lease.Release(context.WithoutCancel(ctx))
				mu.Lock()
				res.holds = append(res.holds, h)
				switch {
				case lost != nil:
					res.violations = append(res.violations, fmt.Sprintf("worker-%d lost its lease: %v", w, lost))
				case relErr != nil:
					res.violations = append(res.violations, fmt.Sprintf("worker-%d release: %v", w, relErr))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return res, nil
}

// summaryRow is the outcome of one part of a stage: a lock, a semaphore
// or an election.
type summaryRow struct {
	capacity            int // holders allowed at once: 1 for a lock
	acquisitions        int
	maxInside           int
	overlaps, badTokens int
	maxWait             time.Duration
	perWorker           []int
	violations          []string
	handover, failover  time.Duration // elections: longest resign handover; takeover after the leader died
}

func (r summaryRow) ok() bool {
	return len(r.violations) == 0 && r.maxInside <= r.capacity
}

// check replays the holds on the one clock they were recorded with: more
// than capacity at once is a violation, and so, for a lock, is a fencing
// token that failed to grow from one holder to the next.
func (r *demoResult) check(workers, capacity int) summaryRow {
	holds := append([]hold(nil), r.holds...)
	sort.Slice(holds, func(i, j int) bool { return holds[i].acquired < holds[j].acquired })
	row := summaryRow{capacity: capacity, acquisitions: len(holds), maxInside: int(r.maxInside),
		violations: r.violations, perWorker: make([]int, workers)}
	var held []hold // holds live at the current acquisition, on the demo's clock
	for i, h := range holds {
		held = slices.DeleteFunc(held, func(o hold) bool { return o.released <= h.acquired })
		held = append(held, h)
		if len(held) > capacity {
			row.overlaps++
			row.violations = append(row.violations, fmt.Sprintf("worker-%d acquired at %v while %d others held (capacity %d)",
				h.worker, h.acquired, len(held)-1, capacity))
		}
		if capacity == 1 && i > 0 && h.token != 0 && h.token <= holds[i-1].token {
			row.badTokens++
			row.violations = append(row.violations, fmt.Sprintf("fencing token %d granted after %d", h.token, holds[i-1].token))
		}
		row.maxInside = max(row.maxInside, len(held))
	}
	for _, h := range holds {
		row.perWorker[h.worker-1]++
		row.maxWait = max(row.maxWait, h.waited)
	}
	return row
}

// elections runs three candidates, each on a backend of its own opened from
// url: the leader leads for a moment and resigns, twice (the handover),
// then "crashes": its backend is closed, so it neither renews nor resigns,
// and the others take over once its lease runs out (the failover).
func elections(ctx context.Context, url string, cfg demoConfig, s *story) (summaryRow, error) {
	const candidates, resigns = 3, 2
	name := cfg.key + "-leader"
	s.event("election: %d candidates for %q; the leader resigns %d times, then crashes (ttl %v)", candidates, name, resigns, demoTTL)
	type term struct {
		candidate int
		resign    chan<- struct{} // closing it makes the leader's fn return: leader.Run then resigns
		at        time.Duration
	}
	var (
		mu       sync.Mutex // protects leading, lastTerm and row
		leading  int        // the candidate that believes it leads, 0 for none
		lastTerm uint64
		row      = summaryRow{capacity: 1}
		terms    = make(chan term)
		runCtx   context.Context
		cancel   context.CancelFunc
		wg       sync.WaitGroup
		backends []*dsync.Backend
	)
	runCtx, cancel = context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
		for _, b := range backends {
			_ = b.Close()
		}
	}()
	// result stops the candidates before it reads row, which their fn
	// still writes while they run.
	result := func() summaryRow {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return row
	}
	for c := 1; c <= candidates; c++ {
		b, err := dsync.Open(ctx, url)
		if err != nil {
			return result(), err
		}
		backends = append(backends, b)
		e, err := leader.New(b, name, fmt.Sprintf("candidate-%d", c), &leader.Options{TTL: demoTTL})
		if err != nil {
			return result(), err
		}
		wg.Go(func() {
			// Run campaigns, calls fn while leading, resigns when fn
			// returns, waits a retry period and campaigns again; it ends
			// when runCtx does, or when this candidate's backend is
			// closed (the crash).
			_ = leader.Run(runCtx, e, func(ctx context.Context, tm uint64) error {
				mu.Lock()
				row.acquisitions++
				if leading != 0 {
					row.overlaps++
					row.violations = append(row.violations, fmt.Sprintf("candidate-%d leads while candidate-%d believes it does", c, leading))
				}
				if tm != 0 && tm <= lastTerm {
					row.badTokens++
					row.violations = append(row.violations, fmt.Sprintf("term %d began after term %d", tm, lastTerm))
				}
				leading, lastTerm = c, max(lastTerm, tm)
				row.maxInside = max(row.maxInside, 1+row.overlaps)
				mu.Unlock()
				s.event("candidate-%d  leads, term %d", c, tm)
				resign := make(chan struct{})
				select {
				case terms <- term{candidate: c, resign: resign, at: s.since()}:
				case <-ctx.Done():
				}
				select {
				case <-resign:
				case <-ctx.Done(): // leadership lost, or the demo is over
				}
				mu.Lock()
				if leading == c {
					leading = 0
				}
				mu.Unlock()
				return nil
			}, nil)
		})
	}
	next := func() (term, error) {
		select {
		case t := <-terms:
			return t, nil
		case <-time.After(10 * demoTTL):
			return term{}, fmt.Errorf("no leader within %v", 10*demoTTL)
		}
	}
	t, err := next()
	if err != nil {
		return result(), err
	}
	for i := 0; ; i++ {
		time.Sleep(cfg.work) // the leader's work
		ended := s.since()
		if i < resigns {
			s.event("candidate-%d  resigns", t.candidate)
			close(t.resign)
		} else {
			s.event("candidate-%d  crashes: no more renewals, no resignation", t.candidate)
			_ = backends[t.candidate-1].Close()
		}
		if t, err = next(); err != nil {
			return result(), err
		}
		mu.Lock()
		if i < resigns {
			row.handover = max(row.handover, t.at-ended)
		} else {
			row.failover = t.at - ended
		}
		mu.Unlock()
		if i < resigns {
			continue
		}
		close(t.resign)
		return result(), nil
	}
}
