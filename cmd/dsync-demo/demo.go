package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
	"github.com/dsync-dev/dsync/semaphore"
)

// demoTTL is the lease TTL of every demo stage; the Redlock stages use a
// max_ttl just above it so that the fresh masters' quarantine is short.
const (
	demoTTL    = 2 * time.Second
	demoMaxTTL = 3 * time.Second
)

type demoConfig struct {
	key            string
	workers, round int
	work           time.Duration
	size           int // permits of the semaphore part
}

// stage is one backend the demo runs the contention on.
type stage struct {
	title string
	url   string
	// prepare runs after the backend is open, before the workers start.
	prepare func(ctx context.Context, b *dsync.Backend) error
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("dsync-demo", stdout, stderr, "usage: dsync-demo [flags]\n       dsync-demo check [flags]   (the soak; see dsync-demo check --help)\n\n"+
		"Runs contending workers on locks, a semaphore and an election, on each backend, and checks\n"+
		"mutual exclusion, fencing, the semaphore's bound and one leader at a time. Without --url it starts\n"+
		"single Redis, Redlock (5 masters) and a 3-member etcd itself (the memory backend stands in for Redis\n"+
		"when redis-server is missing), and kills servers along the way.")
	urlOf := urlFlag(fs, "backend URL (default: start the servers here)")
	var cfg demoConfig
	fs.IntVar(&cfg.workers, "workers", 4, "number of contending workers")
	fs.IntVar(&cfg.round, "rounds", 5, "acquisitions per worker")
	fs.DurationVar(&cfg.work, "work", 40*time.Millisecond, "time spent holding the lock each round")
	fs.StringVar(&cfg.key, "key", "demo/report", "lock name (the semaphore is NAME-pool)")
	fs.IntVar(&cfg.size, "size", 2, "permits of the semaphore the workers share in the second part")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	url := urlOf()
	if cfg.workers < 1 || cfg.round < 1 || cfg.work < 0 || cfg.size < 1 {
		fmt.Fprintln(stderr, "dsync-demo: --workers, --rounds and --size must be at least 1, --work not negative")
		return exitUsage
	}

	var stages []stage
	if url != "" {
		stages = []stage{{title: dsync.RedactURL(url), url: url}}
	} else {
		var cleanup func()
		var code int
		stages, cleanup, code = defaultStages(ctx, stdout, stderr)
		if cleanup != nil {
			defer cleanup()
		}
		if code != exitOK {
			return code
		}
	}

	var rows []summaryRow
	status := exitOK
	for _, st := range stages {
		fmt.Fprintf(stdout, "\n== %s ==\n", st.title)
		b, code := openBackend(ctx, st.url, stderr)
		if code != exitOK {
			return code
		}
		if st.prepare != nil {
			if err := st.prepare(ctx, b); err != nil {
				b.Close()
				fmt.Fprintf(stderr, "dsync-demo: %s\n", oneLine(err))
				return exitFail
			}
		}
		fmt.Fprintf(stdout, "backend: %s\n", b)
		stageRows, err := demoStage(ctx, b, st.url, st.title, cfg, stdout)
		b.Close()
		if err != nil {
			fmt.Fprintf(stderr, "dsync-demo: %s: %s\n", st.title, oneLine(err))
			return exitFail
		}
		for _, row := range stageRows {
			rows = append(rows, row)
			if !row.ok() {
				status = exitFail
			}
		}
	}
	printSummary(stdout, rows)
	return status
}

// defaultStages starts throw-away servers (see startEmbedded) and returns
// the demo's stages on them; cleanup stops whatever was started.
func defaultStages(ctx context.Context, stdout, stderr io.Writer) ([]stage, func(), int) {
	e, cleanup, code := startEmbedded(ctx, stdout, stderr)
	if code != exitOK {
		return nil, cleanup, code
	}
	cluster := e.cluster
	etcdStages := []stage{
		{title: "etcd, 3 members", url: cluster.URL()},
		{title: "etcd, leader killed", url: cluster.URL(), prepare: func(ctx context.Context, b *dsync.Backend) error {
			i, err := cluster.Leader(ctx)
			if err != nil {
				return err
			}
			cluster.Kill(i)
			fmt.Fprintf(stdout, "killed the etcd leader, member %d on %s; the other two elect a new one\n", i, cluster.Endpoint(i))
			return nil
		}},
	}
	if e.single == nil {
		return append([]stage{{title: "memory (in-process)", url: "memory://demo"}}, etcdStages...), cleanup, exitOK
	}
	return append([]stage{
		{title: "single Redis", url: e.single.URL()},
		{title: "Redlock, 5 masters", url: e.redlockURL(), prepare: waitQuarantine(stdout)},
		{title: "Redlock, 2 of 5 masters killed", url: e.redlockURL(), prepare: func(ctx context.Context, b *dsync.Backend) error {
			for _, s := range e.masters[3:] {
				if err := s.Kill(); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "killed the master on %s (SIGKILL)\n", s.Addr())
			}
			return nil
		}},
	}, etcdStages...), cleanup, exitOK
}

// waitQuarantine waits out the restart quarantine of freshly started
// Redlock masters, saying why.
func waitQuarantine(out io.Writer) func(ctx context.Context, b *dsync.Backend) error {
	return func(ctx context.Context, b *dsync.Backend) error {
		d, ok := b.Driver().(*redlock.Driver)
		if !ok {
			return nil
		}
		if d.QuarantineCheck(time.Now()) == nil {
			return nil
		}
		fmt.Fprintf(out, "the masters are younger than max_ttl (%v): a master that restarted may have lost the locks it held,\nso Redlock does not count its vote until max_ttl has passed since it started. Waiting...\n", demoMaxTTL)
		start := time.Now()
		for d.QuarantineCheck(time.Now()) != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		fmt.Fprintf(out, "quarantine over after %v\n", time.Since(start).Round(10*time.Millisecond))
		return nil
	}
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

// demoStage runs the parts of the demo on one backend: workers contending
// for a lock, then for the permits of a semaphore, then candidates of an
// election.
func demoStage(ctx context.Context, b *dsync.Backend, url, title string, cfg demoConfig, out io.Writer) ([]summaryRow, error) {
	var rows []summaryRow
	l, err := locker.New(b, cfg.key, &locker.Options{TTL: demoTTL})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n-- lock: %d workers contend for the lock %q, %d rounds each, holding it %v per round (ttl %v)\n\n",
		cfg.workers, cfg.key, cfg.round, cfg.work, demoTTL)
	res, err := contend(ctx, l, "lock", cfg, out)
	if err != nil {
		return nil, err
	}
	rows = append(rows, res.check(title+" / lock", cfg.workers, 1))
	rows[len(rows)-1].print(out)

	pool := cfg.key + "-pool"
	s, err := semaphore.New(b, pool, cfg.size, &semaphore.Options{TTL: demoTTL})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n-- semaphore: %d workers share the %d permits of %q, %d rounds each, holding one %v per round\n\n",
		cfg.workers, cfg.size, pool, cfg.round, cfg.work)
	res, err = contend(ctx, semAcquirer{s}, "permit", cfg, out)
	if err != nil {
		return nil, err
	}
	rows = append(rows, res.check(fmt.Sprintf("%s / semaphore(%d)", title, cfg.size), cfg.workers, cfg.size))
	rows[len(rows)-1].print(out)

	row, err := elections(ctx, url, title+" / election", cfg, out)
	if err != nil {
		return nil, err
	}
	row.print(out)
	return append(rows, row), nil
}

// contend runs the workers and records every hold on one clock.
func contend(ctx context.Context, l acquirer, what string, cfg demoConfig, out io.Writer) (*demoResult, error) {
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
	for w := 1; w <= cfg.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cfg.round {
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
				logf("worker-%d  acquired %s  token %-4d (waited %v, %d held)", w, what, h.token, h.waited.Round(time.Millisecond), n)
				mu.Unlock()

				select {
				case <-time.After(cfg.work):
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

// summaryRow is the outcome of one part of a stage.
type summaryRow struct {
	title               string
	capacity            int // holders allowed at once: 1 for a lock
	acquisitions        int
	maxInside           int
	overlaps, badTokens int
	maxWait             time.Duration
	perWorker           []int
	violations          []string
	election            bool
	handover, failover  time.Duration // elections: longest resign handover; takeover after the leader died
}

func (r summaryRow) ok() bool {
	return len(r.violations) == 0 && r.maxInside <= r.capacity
}

// check replays the holds on the one clock they were recorded with: more
// than capacity at once is a violation, and so, for a lock, is a fencing
// token that failed to grow from one holder to the next.
func (r *demoResult) check(title string, workers, capacity int) summaryRow {
	holds := append([]hold(nil), r.holds...)
	sort.Slice(holds, func(i, j int) bool { return holds[i].acquired < holds[j].acquired })
	row := summaryRow{title: title, capacity: capacity, acquisitions: len(holds), maxInside: int(r.maxInside),
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

func (r summaryRow) print(out io.Writer) {
	fmt.Fprintln(out)
	if r.election {
		fmt.Fprintf(out, "terms:                     %d\n", r.acquisitions)
		fmt.Fprintf(out, "leaders at once:           %d (at most 1)\n", r.maxInside)
		fmt.Fprintf(out, "terms increasing:          %v\n", r.badTokens == 0)
		fmt.Fprintf(out, "handover on resign:        %v (longest)\n", r.handover.Round(10*time.Microsecond))
		fmt.Fprintf(out, "failover after a crash:    %v (ttl %v)\n", r.failover.Round(time.Millisecond), demoTTL)
		if r.ok() {
			fmt.Fprintln(out, "OK: one leader at a time, and every term above the last")
			return
		}
		fmt.Fprintln(out, "\nVIOLATIONS:")
		for _, v := range r.violations {
			fmt.Fprintln(out, "  "+v)
		}
		return
	}
	fmt.Fprintf(out, "acquisitions:              %d\n", r.acquisitions)
	fmt.Fprintf(out, "max concurrent holders:    %d (at most %d)\n", r.maxInside, r.capacity)
	fmt.Fprintf(out, "overlapping holds:         %d (must be 0)\n", r.overlaps)
	if r.capacity == 1 {
		fmt.Fprintf(out, "fencing tokens increasing: %v\n", r.badTokens == 0)
	}
	fmt.Fprintf(out, "longest wait:              %v\n", r.maxWait.Round(time.Millisecond))
	fmt.Fprintf(out, "acquisitions per worker:   %v\n", r.perWorker)
	switch {
	case !r.ok():
		fmt.Fprintln(out, "\nVIOLATIONS:")
		for _, v := range r.violations {
			fmt.Fprintln(out, "  "+v)
		}
	case r.capacity == 1:
		fmt.Fprintln(out, "OK: mutual exclusion held and fencing tokens grew with every hold")
	default:
		fmt.Fprintf(out, "OK: never more than %d holders at once\n", r.capacity)
	}
}

func printSummary(out io.Writer, rows []summaryRow) {
	if len(rows) < 2 {
		return
	}
	fmt.Fprintf(out, "\n== summary ==\n%-44s %12s %12s %9s %13s %10s %s\n", "backend / primitive", "acquisitions", "max holders", "overlaps", "longest wait", "failover", "result")
	for _, r := range rows {
		result := "OK"
		if !r.ok() {
			result = "VIOLATION"
		}
		wait, failover := r.maxWait.Round(time.Millisecond).String(), ""
		if r.election {
			wait, failover = "", r.failover.Round(time.Millisecond).String()
		}
		fmt.Fprintf(out, "%-44s %12d %9d/%-2d %9d %13s %10s %s\n", r.title, r.acquisitions, r.maxInside, r.capacity, r.overlaps, wait, failover, result)
	}
}

// elections runs three candidates, each on a backend of its own opened from
// url: the leader leads for a moment and resigns, twice (the handover),
// then "crashes": its backend is closed, so it neither renews nor resigns,
// and the others take over once its lease runs out (the failover).
func elections(ctx context.Context, url, title string, cfg demoConfig, out io.Writer) (summaryRow, error) {
	const candidates, resigns = 3, 2
	name := cfg.key + "-leader"
	fmt.Fprintf(out, "\n-- election: %d candidates for %q; the leader resigns %d times, then crashes (ttl %v)\n\n", candidates, name, resigns, demoTTL)
	type term struct {
		candidate int
		resign    chan<- struct{} // closing it makes the leader's fn return: leader.Run then resigns
		at        time.Duration
	}
	var (
		start    = time.Now()
		since    = func() time.Duration { return time.Since(start) }
		mu       sync.Mutex // protects leading, lastTerm, row and the output
		leading  int        // the candidate that believes it leads, 0 for none
		lastTerm uint64
		row      = summaryRow{title: title, capacity: 1, election: true}
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
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "  %+8.3fs  "+format+"\n", append([]any{since().Seconds()}, args...)...)
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
				logf("candidate-%d  leads, term %d", c, tm)
				mu.Unlock()
				resign := make(chan struct{})
				select {
				case terms <- term{candidate: c, resign: resign, at: since()}:
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
		ended := since()
		mu.Lock()
		if i < resigns {
			logf("candidate-%d  resigns", t.candidate)
		} else {
			logf("candidate-%d  crashes: no more renewals, no resignation", t.candidate)
		}
		mu.Unlock()
		if i < resigns {
			close(t.resign)
		} else {
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
