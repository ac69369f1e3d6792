package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
)

// benchConfig is what dsync bench runs.
type benchConfig struct {
	slices     int           // rounds of interleaving
	slice      time.Duration // time per backend and scenario in each round
	goroutines int           // the throughput scenario's goroutines
	contenders int           // the contended scenario's goroutines
	work       time.Duration // time inside the contended critical section
}

// benchTarget is one backend under measurement.
type benchTarget struct {
	name string
	url  string
	b    *dsync.Backend
}

// benchScenario measures one backend for about d, adding to acc.
type benchScenario struct {
	name string
	run  func(ctx context.Context, b *dsync.Backend, cfg benchConfig, d time.Duration, acc *benchAcc) error
}

// benchAcc accumulates one backend's samples of one scenario over slices.
type benchAcc struct {
	cycles     int
	elapsed    time.Duration
	latencies  []time.Duration // per cycle (uncontended, throughput) or per handoff (contended)
	handoffs   int
	worstWait  time.Duration
	perWorker  []int
	violations int
}

// BenchResult is one row of dsync bench's output (also its JSON and CSV).
type BenchResult struct {
	Scenario   string  `json:"scenario"`
	Backend    string  `json:"backend"`
	Cycles     int     `json:"cycles"`
	PerSecond  float64 `json:"per_second"`
	P50Micros  float64 `json:"p50_us"` // cycle latency; handoff latency when contended
	P99Micros  float64 `json:"p99_us"`
	Handoffs   float64 `json:"handoffs_per_second,omitempty"`
	WorstWait  float64 `json:"worst_wait_ms,omitempty"`
	MinPer     int     `json:"min_per_goroutine,omitempty"`
	MaxPer     int     `json:"max_per_goroutine,omitempty"`
	Violations int     `json:"violations"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("bench", stderr)
	var urls multiFlag
	fs.Var(&urls, "url", "backend URL to measure, repeatable (default: start single Redis, Redlock on 5 masters and a 3-member etcd)")
	var cfg benchConfig
	fs.IntVar(&cfg.slices, "slices", 3, "rounds: each round runs every scenario on every backend for --slice, so all see the same machine noise")
	fs.DurationVar(&cfg.slice, "slice", 500*time.Millisecond, "time per backend and scenario in each round")
	fs.IntVar(&cfg.goroutines, "goroutines", 16, "goroutines of the throughput scenario (distinct keys)")
	fs.IntVar(&cfg.contenders, "contenders", 8, "goroutines of the contended scenario (one key)")
	fs.DurationVar(&cfg.work, "work", 100*time.Microsecond, "time spent inside the contended critical section")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	asCSV := fs.Bool("csv", false, "print the results as CSV")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if cfg.slices < 1 || cfg.slice <= 0 || cfg.goroutines < 1 || cfg.contenders < 2 || cfg.work < 0 || (*asJSON && *asCSV) {
		fmt.Fprintln(stderr, "dsync bench: --slices and --goroutines must be at least 1, --contenders at least 2, --slice positive, --work not negative, and only one of --json and --csv")
		return exitUsage
	}
	info := stdout // what was started and waited for; kept off machine-readable output
	if *asJSON || *asCSV {
		info = stderr
	}

	var targets []*benchTarget
	if len(urls) > 0 {
		for _, u := range urls {
			targets = append(targets, &benchTarget{name: dsync.RedactURL(u), url: u})
		}
	} else {
		e, cleanup, code := startEmbedded(ctx, info, stderr)
		defer cleanup()
		if code != exitOK {
			return code
		}
		if e.single != nil {
			targets = append(targets, &benchTarget{name: "redis", url: e.single.URL()}, &benchTarget{name: "redlock-5", url: e.redlockURL()})
		} else {
			targets = append(targets, &benchTarget{name: "memory", url: "memory://bench"})
		}
		targets = append(targets, &benchTarget{name: "etcd-3", url: e.cluster.URL()})
	}
	for _, t := range targets {
		b, code := openBackend(ctx, t.url, stderr)
		if code != exitOK {
			return code
		}
		defer b.Close()
		if err := waitQuarantine(info)(ctx, b); err != nil {
			fmt.Fprintf(stderr, "dsync bench: %s\n", oneLine(err))
			return exitFail
		}
		t.b = b
	}

	results, err := bench(ctx, targets, cfg, progressBar(stderr))
	if err != nil {
		fmt.Fprintf(stderr, "dsync bench: %s\n", oneLine(err))
		return exitFail
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	case *asCSV:
		writeBenchCSV(stdout, results)
	default:
		fmt.Fprintf(stdout, "\n%d rounds of %v per backend and scenario, interleaved; %d goroutines for throughput, %d contenders with %v of work\n\n",
			cfg.slices, cfg.slice, cfg.goroutines, cfg.contenders, cfg.work)
		writeBenchTable(stdout, results)
	}
	for _, r := range results {
		if r.Violations > 0 {
			return exitFail
		}
	}
	return exitOK
}

// bench runs every scenario on every backend, interleaved in slices.
func bench(ctx context.Context, targets []*benchTarget, cfg benchConfig, progress func(done, total int, what string)) ([]BenchResult, error) {
	scenarios := benchScenarios()
	accs := make([][]benchAcc, len(scenarios))
	for i := range accs {
		accs[i] = make([]benchAcc, len(targets))
	}
	total, done := cfg.slices*len(scenarios)*len(targets), 0
	for range cfg.slices {
		for i, sc := range scenarios {
			for j, t := range targets {
				progress(done, total, t.name+" "+sc.name)
				if err := sc.run(ctx, t.b, cfg, cfg.slice, &accs[i][j]); err != nil {
					return nil, fmt.Errorf("%s, %s: %w", t.name, sc.name, err)
				}
				done++
			}
		}
	}
	progress(total, total, "")
	var results []BenchResult
	for i, sc := range scenarios {
		for j, t := range targets {
			results = append(results, accs[i][j].result(sc.name, t.name))
		}
	}
	return results, nil
}

func (a *benchAcc) result(scenario, backend string) BenchResult {
	r := BenchResult{Scenario: scenario, Backend: backend, Cycles: a.cycles, Violations: a.violations}
	if a.elapsed > 0 {
		r.PerSecond = float64(a.cycles) / a.elapsed.Seconds()
		if a.perWorker != nil {
			r.Handoffs = float64(a.handoffs) / a.elapsed.Seconds()
		}
	}
	slices.Sort(a.latencies)
	r.P50Micros = micros(percentile(a.latencies, 0.50))
	r.P99Micros = micros(percentile(a.latencies, 0.99))
	if a.perWorker != nil {
		r.WorstWait = float64(a.worstWait.Microseconds()) / 1000
		r.MinPer, r.MaxPer = slices.Min(a.perWorker), slices.Max(a.perWorker)
	}
	return r
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

// benchLockOptions are the defaults but for the TTL, which the embedded
// Redlock's max_ttl bounds.
var benchLockOptions = &locker.Options{TTL: demoTTL}

var benchRun atomic.Int64 // makes keys unique across slices and runs

func benchScenarios() []benchScenario {
	return []benchScenario{
		{"uncontended", func(ctx context.Context, b *dsync.Backend, cfg benchConfig, d time.Duration, acc *benchAcc) error {
			return cycles(ctx, b, 1, d, acc, func(int) string { return fmt.Sprintf("bench/u/%d", benchRun.Add(1)) })
		}},
		{"throughput", func(ctx context.Context, b *dsync.Backend, cfg benchConfig, d time.Duration, acc *benchAcc) error {
			run := benchRun.Add(1)
			return cycles(ctx, b, cfg.goroutines, d, acc, func(g int) string { return fmt.Sprintf("bench/t/%d/%d", run, g) })
		}},
		{"contended", contended},
	}
}

// cycles runs lock+unlock cycles in n goroutines for d, each on the key
// keyOf returns before every cycle, recording each cycle's latency.
func cycles(ctx context.Context, b *dsync.Backend, n int, d time.Duration, acc *benchAcc, keyOf func(g int) string) error {
	var (
		mu       sync.Mutex // protects acc and firstErr
		firstErr error
		wg       sync.WaitGroup
		start    = time.Now()
		end      = start.Add(d)
	)
	for g := range n {
		wg.Go(func() {
			var lat []time.Duration
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				l, err := locker.New(b, keyOf(g), benchLockOptions)
				if err == nil {
					var lease dsync.Lease
					if lease, err = l.Acquire(ctx); err == nil {
						err = lease.Release(ctx)
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			acc.latencies = append(acc.latencies, lat...)
			acc.cycles += len(lat)
			mu.Unlock()
		})
	}
	wg.Wait()
	acc.elapsed += time.Since(start)
	return firstErr
}

// contended runs cfg.contenders goroutines on one key, each holding the
// lock for cfg.work per acquisition, and records handoffs (the lock passing
// to a different goroutine: the time from the previous holder's release to
// the next one's acquisition), the longest wait, and acquisitions per
// goroutine. More than one goroutine inside is a violation.
func contended(ctx context.Context, b *dsync.Backend, cfg benchConfig, d time.Duration, acc *benchAcc) error {
	l, err := locker.New(b, fmt.Sprintf("bench/c/%d", benchRun.Add(1)), benchLockOptions)
	if err != nil {
		return err
	}
	if acc.perWorker == nil {
		acc.perWorker = make([]int, cfg.contenders)
	}
	var (
		mu        sync.Mutex // protects the fields below and acc
		lastOwner = -1
		released  time.Time
		firstErr  error
		inside    atomic.Int32
		wg        sync.WaitGroup
		start     = time.Now()
		end       = start.Add(d)
	)
	for g := range cfg.contenders {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				asked := time.Now()
				wctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
				lease, err := l.Acquire(wctx)
				cancel()
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						return // still waiting well after the slice: the others finished
					}
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				got := time.Now()
				if inside.Add(1) != 1 {
					mu.Lock()
					acc.violations++
					mu.Unlock()
				}
				mu.Lock()
				acc.cycles++
				acc.perWorker[g]++
				acc.worstWait = max(acc.worstWait, got.Sub(asked))
				if lastOwner >= 0 && lastOwner != g {
					acc.handoffs++
					acc.latencies = append(acc.latencies, got.Sub(released))
				}
				mu.Unlock()
				spin(cfg.work)
				mu.Lock()
				lastOwner, released = g, time.Now()
				mu.Unlock()
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	acc.elapsed += time.Since(start)
	return firstErr
}

// spin busy-waits for d: a sleep would round 100µs up to the timer's
// resolution.
func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

func cmpOr(err, next error) error {
	if err != nil {
		return err
	}
	return next
}

func writeBenchTable(w io.Writer, results []BenchResult) {
	fmt.Fprintf(w, "%-12s %-14s %10s %10s %10s %11s %11s %12s %10s\n",
		"scenario", "backend", "cycles/s", "p50", "p99", "handoffs/s", "worst wait", "min/max per", "violations")
	for _, r := range results {
		handoffs, worst, fair := "", "", ""
		if r.Scenario == "contended" {
			handoffs = fmt.Sprintf("%.0f", r.Handoffs)
			worst = fmt.Sprintf("%.1fms", r.WorstWait)
			fair = fmt.Sprintf("%d/%d", r.MinPer, r.MaxPer)
		}
		fmt.Fprintf(w, "%-12s %-14s %10.0f %10s %10s %11s %11s %12s %10d\n",
			r.Scenario, r.Backend, r.PerSecond, fmtMicros(r.P50Micros), fmtMicros(r.P99Micros), handoffs, worst, fair, r.Violations)
	}
	fmt.Fprintln(w, "\np50/p99: lock+unlock latency; for contended, the handoff latency (release to the next goroutine's acquisition)")
}

func fmtMicros(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2fms", us/1000)
	}
	return fmt.Sprintf("%.0fµs", us)
}

func writeBenchCSV(w io.Writer, results []BenchResult) {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"scenario", "backend", "cycles", "per_second", "p50_us", "p99_us", "handoffs_per_second", "worst_wait_ms", "min_per_goroutine", "max_per_goroutine", "violations"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for _, r := range results {
		_ = cw.Write([]string{r.Scenario, r.Backend, strconv.Itoa(r.Cycles), f(r.PerSecond), f(r.P50Micros), f(r.P99Micros),
			f(r.Handoffs), f(r.WorstWait), strconv.Itoa(r.MinPer), strconv.Itoa(r.MaxPer), strconv.Itoa(r.Violations)})
	}
	cw.Flush()
}

// progressBar returns a progress reporter drawing a bar on w when w is a
// terminal, and reporting nothing otherwise.
func progressBar(w io.Writer) func(done, total int, what string) {
	f, ok := w.(*os.File)
	if !ok {
		return func(int, int, string) {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func(int, int, string) {}
	}
	const width = 30
	return func(done, total int, what string) {
		n := done * width / max(total, 1)
		fmt.Fprintf(f, "\r[%s%s] %3d%%  %-30s", strings.Repeat("#", n), strings.Repeat(".", width-n), done*100/max(total, 1), what)
		if done == total {
			fmt.Fprint(f, "\r"+strings.Repeat(" ", width+40)+"\r")
		}
	}
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
