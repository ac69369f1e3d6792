package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/redistest"
	"github.com/dsync-dev/dsync/locker"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("demo", stderr)
	url := fs.String("url", os.Getenv("DSYNC_URL"), "backend URL (default: start a redis-server, else memory://demo)")
	workers := fs.Int("workers", 4, "number of contending workers")
	rounds := fs.Int("rounds", 5, "acquisitions per worker")
	work := fs.Duration("work", 40*time.Millisecond, "time spent holding the lock each round")
	key := fs.String("key", "demo/report", "lock name")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *workers < 1 || *rounds < 1 || *work < 0 {
		fmt.Fprintln(stderr, "dsync demo: --workers and --rounds must be at least 1, --work not negative")
		return exitUsage
	}

	if *url == "" {
		srv, u, code := startDemoRedis(ctx, stdout, stderr)
		if code != exitOK {
			return code
		}
		if srv != nil {
			defer func() {
				_ = srv.Close()
				fmt.Fprintf(stdout, "stopped the redis-server on %s and removed its data\n", srv.Addr())
			}()
		}
		*url = u
	}
	b, code := openBackend(ctx, *url, stderr)
	if code != exitOK {
		return code
	}
	defer b.Close()

	fmt.Fprintf(stdout, "backend: %s\n", b)
	fmt.Fprintf(stdout, "%d workers contend for the lock %q, %d rounds each, holding it %v per round\n\n", *workers, *key, *rounds, *work)
	res, err := contend(ctx, b, *key, *workers, *rounds, *work, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "dsync demo: %s\n", oneLine(err))
		return exitFail
	}
	return res.report(stdout, *workers)
}

// startDemoRedis starts a throw-away redis-server when one is installed;
// otherwise it falls back to the memory backend and says so.
func startDemoRedis(ctx context.Context, stdout, stderr io.Writer) (*redistest.Server, string, int) {
	if _, err := redistest.Lookup(); err != nil {
		fmt.Fprintf(stdout, "redis-server is not installed, so the demo runs on the in-process memory backend\n(install it with: sudo apt-get install -y redis-server)\n")
		return nil, "memory://demo", exitOK
	}
	srv, err := redistest.StartServer(ctx, nil)
	if err != nil {
		fmt.Fprintf(stderr, "dsync demo: starting redis-server: %s\n", oneLine(err))
		return nil, "", exitFail
	}
	fmt.Fprintf(stdout, "started redis-server (pid %d) on %s for this demo; it is stopped on exit\n", srv.PID(), srv.Addr())
	return srv, srv.URL(), exitOK
}

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

// contend runs the workers and records every hold on one clock.
func contend(ctx context.Context, b *dsync.Backend, key string, workers, rounds int, work time.Duration, out io.Writer) (*demoResult, error) {
	l, err := locker.New(b, key, &locker.Options{TTL: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	var (
		start    = time.Now()
		inside   atomic.Int32
		mu       sync.Mutex // protects res and the output
		res      = &demoResult{}
		wg       sync.WaitGroup
		firstErr error
	)
	since := func() time.Duration { return time.Since(start) }
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "  %+8.3fs  "+format+"\n", append([]any{since().Seconds()}, args...)...)
	}
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				asked := since()
				lease, err := l.Acquire(ctx)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				h := hold{worker: w, token: lease.Token(), acquired: since()}
				h.waited = h.acquired - asked
				n := inside.Add(1)
				mu.Lock()
				res.maxInside = max(res.maxInside, n)
				logf("worker-%d  acquired  token %-4d (waited %v)", w, h.token, h.waited.Round(time.Millisecond))
				mu.Unlock()

				select {
				case <-time.After(work):
				case <-lease.Done():
				}

				inside.Add(-1)
				h.released = since()
				lost := lease.Err()
				mu.Lock()
				logf("worker-%d  releases", w)
				mu.Unlock()
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
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return res, nil
}

// report checks the recorded holds and prints the summary; it returns the
// exit status.
func (r *demoResult) report(out io.Writer, workers int) int {
	holds := append([]hold(nil), r.holds...)
	sort.Slice(holds, func(i, j int) bool { return holds[i].acquired < holds[j].acquired })
	overlaps, badTokens := 0, 0
	for i := 1; i < len(holds); i++ {
		if holds[i].acquired < holds[i-1].released {
			overlaps++
			r.violations = append(r.violations, fmt.Sprintf("worker-%d acquired at %v while worker-%d held until %v",
				holds[i].worker, holds[i].acquired, holds[i-1].worker, holds[i-1].released))
		}
		if holds[i].token != 0 && holds[i].token <= holds[i-1].token {
			badTokens++
			r.violations = append(r.violations, fmt.Sprintf("fencing token %d granted after %d", holds[i].token, holds[i-1].token))
		}
	}
	perWorker := make([]int, workers+1)
	var maxWait time.Duration
	for _, h := range holds {
		perWorker[h.worker]++
		maxWait = max(maxWait, h.waited)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "acquisitions:              %d\n", len(holds))
	fmt.Fprintf(out, "max concurrent holders:    %d (must be 1)\n", r.maxInside)
	fmt.Fprintf(out, "overlapping holds:         %d (must be 0)\n", overlaps)
	fmt.Fprintf(out, "fencing tokens increasing: %v\n", badTokens == 0)
	fmt.Fprintf(out, "longest wait:              %v\n", maxWait.Round(time.Millisecond))
	fmt.Fprintf(out, "acquisitions per worker:   %v\n", perWorker[1:])
	if len(r.violations) > 0 || r.maxInside > 1 {
		fmt.Fprintln(out, "\nVIOLATIONS:")
		for _, v := range r.violations {
			fmt.Fprintln(out, "  "+v)
		}
		return exitFail
	}
	fmt.Fprintln(out, "\nOK: mutual exclusion held and fencing tokens grew with every hold")
	return exitOK
}
