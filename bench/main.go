// Command bench measures dsync side by side with its Go peers, in one run,
// on servers it starts itself: go-redsync/redsync (1 and 5 Redis
// instances), bsm/redislock (1 instance), etcd's concurrency.Mutex (an
// embedded member), and the raw floors (go-redis SET NX PX and a
// compare-and-delete script on 1 instance; the same fanned out in parallel
// to 5).
//
// It is a module of its own, so that the peers never become dependencies
// of the library. run.sh is the way to run it:
//
//	bench run [flags] -out FILE.json      measure, writing per-round samples
//	bench run -url URL [-url URL...] -out FILE.json   measure dsync alone on your servers
//	bench report -full F -pinned P -dir D  write D/latest.md, latest.json, contention.png
//	bench compare -old F,... -new F,...    two builds' runs side by side (compare.sh)
//
// Every target runs in every round, in a short slice per scenario, in an
// order rotated each round, so that all see the same machine noise (the
// uncontended scenario interleaves the targets of a group cycle by cycle,
// in one slice as long as theirs); ratios are taken within a round and
// summarised as the median, min and max over rounds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/dsync-dev/dsync/backends/etcd"
	_ "github.com/dsync-dev/dsync/backends/redis"
	_ "github.com/dsync-dev/dsync/redlock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(ctx, os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	case "compare":
		err = compareCmd(os.Args[2:], os.Stdout)
	default:
		usage(os.Stderr)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bench run [flags] -out FILE.json | bench report -full FILE.json [-pinned FILE.json] -dir DIR | bench compare -old F,... -new F,...")
}

// Config is what a run measures.
type Config struct {
	Rounds         int      `json:"rounds"`
	Slice          Duration `json:"slice"`            // per target and scenario in each round
	ContSlice      Duration `json:"contention_slice"` // likewise, for the contention scenarios
	Goroutines     int      `json:"goroutines"`       // throughput scenario, distinct keys
	Contenders     int      `json:"contenders"`       // contention scenario, one key
	Work           Duration `json:"work"`             // inside the contended critical section
	Scenarios      []string `json:"scenarios"`
	LockTTL        Duration `json:"lock_ttl"`
	SemFreeSize    int      `json:"semaphore_free_size"`
	SemPoolSize    int      `json:"semaphore_pool_size"`
	SemPoolWorkers int      `json:"semaphore_pool_workers"`
	SemPoolWork    Duration `json:"semaphore_pool_work"`
	FailoverTTL    Duration `json:"failover_ttl"`
}

// Duration is a time.Duration that marshals as its string.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Scenario names.
const (
	scUncontended = "uncontended"
	scThroughput  = "throughput"
	scContention  = "contention"
	scSemaphore   = "semaphore"
	scFailover    = "failover"
)

var allScenarios = []string{scUncontended, scThroughput, scContention, scSemaphore, scFailover}

// RunResult is everything one run measured, per round: the input of report.
type RunResult struct {
	Mode    string            `json:"mode"` // "2 cores" or "pinned to CPU 0"
	Machine Machine           `json:"machine"`
	Config  Config            `json:"config"`
	Targets []TargetInfo      `json:"targets"`
	Rounds  []Round           `json:"rounds"`
	Errors  map[string]string `json:"errors,omitempty"` // "scenario: target" -> the error that dropped it from the run
}

// TargetInfo describes a target in the JSON output.
type TargetInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Variant string `json:"variant,omitempty"`
	Group   string `json:"group"`
	Role    string `json:"role"`
}

// Round is one round's samples, by target ID.
type Round struct {
	Uncontended map[string]CycleSample `json:"uncontended,omitempty"`
	Throughput  map[string]CycleSample `json:"throughput,omitempty"`
	Contention  map[string]ContSample  `json:"contention,omitempty"`
	SemFree     map[string]CycleSample `json:"semaphore_free,omitempty"`
	SemPool     map[string]ContSample  `json:"semaphore_pool,omitempty"`
	Failover    []FailoverSample       `json:"failover,omitempty"`
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg := Config{LockTTL: Duration(lockTTL), SemFreeSize: semFreeSize, SemPoolSize: semPoolSize, SemPoolWorkers: semPoolWorkers, SemPoolWork: Duration(semPoolWork), FailoverTTL: Duration(failoverTTL)}
	fs.IntVar(&cfg.Rounds, "rounds", 8, "rounds; each runs every target in every scenario once")
	slice := fs.Duration("slice", 400*time.Millisecond, "time per target and scenario in each round")
	contSlice := fs.Duration("contention-slice", time.Second, "time per target in each round of the contention scenarios")
	fs.IntVar(&cfg.Goroutines, "goroutines", 16, "goroutines of the throughput scenario (distinct keys)")
	fs.IntVar(&cfg.Contenders, "contenders", 8, "goroutines of the contention scenario (one key)")
	work := fs.Duration("work", 100*time.Microsecond, "busy work inside the contended critical section")
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	mode := fs.String("mode", "2 cores", "label of the run's CPU placement, for the report")
	commit := fs.String("commit", "", "the dsync commit measured, for the report")
	out := fs.String("out", "", "file to write the samples to (JSON)")
	var urls urlList
	fs.Var(&urls, "url", "measure dsync alone on this backend `URL` (repeatable) instead of starting servers and peers; scenarios: "+strings.Join(urlScenarios, ", "))
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Slice, cfg.ContSlice, cfg.Work = Duration(*slice), Duration(*contSlice), Duration(*work)
	cfg.Scenarios = strings.Split(*scenarios, ",")
	known := allScenarios
	if len(urls) > 0 {
		known = urlScenarios
		if !explicit(fs, "scenarios") {
			cfg.Scenarios = urlScenarios
		}
	}
	for _, sc := range cfg.Scenarios {
		if !contains(known, sc) {
			return fmt.Errorf("unknown scenario %q (known: %s; with -url: %s)", sc, strings.Join(allScenarios, ", "), strings.Join(urlScenarios, ", "))
		}
	}
	if *out == "" || cfg.Rounds < 1 || *slice <= 0 || *contSlice <= 0 || cfg.Goroutines < 1 || cfg.Contenders < 2 || *work < 0 {
		return errors.New("run needs -out, at least 1 round and 1 goroutine, 2 contenders, positive slices and work not negative")
	}

	res := &RunResult{Mode: *mode, Config: cfg, Errors: map[string]string{}}
	res.Machine = machine(*commit)
	var (
		srv                       *servers
		targets, semFree, semPool []*target
	)
	if len(urls) > 0 {
		closeAll, err := urlTargets(ctx, urls, &targets)
		defer closeAll()
		if err != nil {
			return err
		}
	} else {
		var err error
		if srv, err = startServers(ctx); err != nil {
			return err
		}
		defer srv.close()
		cl, err := newClients(srv)
		if err != nil {
			return err
		}
		defer cl.close()
		bk, err := openBackends(ctx, srv)
		if err != nil {
			return err
		}
		defer bk.close()
		targets = allTargets(srv, cl, bk)
		semFree, semPool = semTargets(bk, semFreeSize), semTargets(bk, semPoolSize)
	}
	for _, t := range append(append(targets, semFree...), semPool...) {
		defer t.close()
	}
	for _, t := range targets {
		res.Targets = append(res.Targets, t.info())
	}
	for _, t := range append(semFree, semPool...) {
		res.Targets = append(res.Targets, t.info())
	}

	r := &runner{cfg: cfg, res: res, progress: progress(os.Stderr)}
	plan := r.plan(srv, targets, semFree, semPool)
	r.total = len(plan) * (cfg.Rounds + 1)
	for round := -1; round < cfg.Rounds; round++ { // round -1 warms connections, script caches and handles
		var rd Round
		if round < 0 {
			fmt.Fprintf(os.Stderr, "%s: warm-up round\n", *mode)
		} else {
			fmt.Fprintf(os.Stderr, "%s: round %d of %d\n", *mode, round+1, cfg.Rounds)
		}
		for i := range plan {
			if err := plan[(i+max(round, 0))%len(plan)].run(ctx, round, &rd); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if round >= 0 {
			res.Rounds = append(res.Rounds, rd)
		}
	}
	r.progress(r.total, r.total, "")
	res.Machine.LoadAfter = loadavg()
	return writeJSON(*out, res)
}

func (t *target) info() TargetInfo {
	return TargetInfo{ID: t.id(), Name: t.name, Variant: t.variant, Group: t.group, Role: t.role}
}

// runner runs the slices of a run.
type runner struct {
	cfg         Config
	res         *RunResult
	progress    func(done, total int, what string)
	done, total int
}

// step is one slice of one round: a target in a scenario.
type step struct {
	what string
	run  func(ctx context.Context, round int, rd *Round) error
}

// plan lists the steps of a round, scenario by scenario. A step whose
// target fails is dropped from later rounds, with its error recorded; an
// interrupted run fails.
func (r *runner) plan(srv *servers, targets, semFree, semPool []*target) []step {
	var steps []step
	cfg := r.cfg
	slice, contSlice, work := time.Duration(cfg.Slice), time.Duration(cfg.ContSlice), time.Duration(cfg.Work)
	warm := func(round int, d time.Duration) time.Duration {
		if round < 0 {
			return min(d, 100*time.Millisecond)
		}
		return d
	}
	dropped := func(what string) bool {
		_, failed := r.res.Errors[what]
		return failed
	}
	drop := func(what string, err error) {
		r.res.Errors[what] = err.Error()
		fmt.Fprintf(os.Stderr, "\n%s: %v (dropped from the run)\n", what, err)
	}
	addStep := func(what string, f func(ctx context.Context, round int, rd *Round) error) {
		steps = append(steps, step{what: what, run: func(ctx context.Context, round int, rd *Round) error {
			r.progress(r.done, r.total, what)
			r.done++
			err := f(ctx, round, rd)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				drop(what, err)
			}
			return nil
		}})
	}
	add := func(sc string, t *target, f func(ctx context.Context, round int, rd *Round) error) {
		what := sc + ": " + t.id()
		addStep(what, func(ctx context.Context, round int, rd *Round) error {
			if dropped(what) {
				return nil
			}
			return f(ctx, round, rd)
		})
	}
	put := func(m *map[string]CycleSample, id string, s CycleSample) {
		if *m == nil {
			*m = map[string]CycleSample{}
		}
		(*m)[id] = s
	}
	putC := func(m *map[string]ContSample, id string, s ContSample) {
		if *m == nil {
			*m = map[string]ContSample{}
		}
		(*m)[id] = s
	}
	for _, sc := range cfg.Scenarios {
		switch sc {
		case scUncontended:
			// The targets of one group of servers interleaved, cycle by
			// cycle: the cost ratios are this scenario's point.
			var groups []string
			byGroup := map[string][]*target{}
			for _, t := range targets {
				if t.cycles {
					if byGroup[t.group] == nil {
						groups = append(groups, t.group)
					}
					byGroup[t.group] = append(byGroup[t.group], t)
				}
			}
			for _, g := range groups {
				ts := byGroup[g]
				addStep(sc+": "+g, func(ctx context.Context, round int, rd *Round) error {
					var live []*target
					for _, t := range ts {
						if !dropped(sc + ": " + t.id()) {
							live = append(live, t)
						}
					}
					samples, failed := runInterleaved(ctx, live, warm(round, slice*time.Duration(len(live))))
					if ctx.Err() != nil {
						return ctx.Err()
					}
					for id, s := range samples {
						put(&rd.Uncontended, id, s)
					}
					for id, err := range failed {
						drop(sc+": "+id, err)
					}
					return nil
				})
			}
		case scThroughput:
			for _, t := range targets {
				if t.cycles {
					add(sc, t, func(ctx context.Context, round int, rd *Round) error {
						prefix := nextKey("t")
						s, err := runCycles(ctx, t, cfg.Goroutines, warm(round, slice), func(g int) string { return fmt.Sprintf("%s:%d", prefix, g) })
						if err == nil {
							put(&rd.Throughput, t.id(), s)
						}
						return err
					})
				}
			}
		case scContention:
			for _, t := range targets {
				if t.contended {
					add(sc, t, func(ctx context.Context, round int, rd *Round) error {
						s, err := runContended(ctx, t, cfg.Contenders, 1, nextKey("c"), work, true, warm(round, contSlice))
						if err == nil {
							putC(&rd.Contention, t.id(), s)
						}
						return err
					})
				}
			}
		case scSemaphore:
			for _, t := range semFree {
				add(sc+" free permit", t, func(ctx context.Context, round int, rd *Round) error {
					name := nextKey("sf")
					s, err := runCycles(ctx, t, 1, warm(round, slice), func(int) string { return name })
					if err == nil {
						put(&rd.SemFree, t.id(), s)
					}
					return err
				})
			}
			for _, t := range semPool {
				add(sc+" pool", t, func(ctx context.Context, round int, rd *Round) error {
					s, err := runContended(ctx, t, semPoolWorkers, semPoolSize, nextKey("sp"), semPoolWork, false, warm(round, contSlice))
					if err == nil {
						putC(&rd.SemPool, t.id(), s)
					}
					return err
				})
			}
		case scFailover:
			for _, x := range []struct{ group, url string }{
				{groupRedis, srv.redisURL()}, {groupRedlock, srv.redlockURL()}, {groupEtcd, srv.etcdURL()},
			} {
				t := &target{name: "dsync leader", group: x.group, role: roleDsync}
				add(sc, t, func(ctx context.Context, round int, rd *Round) error {
					if round < 0 {
						return nil // nothing to warm: each trial opens its own backends
					}
					s, err := failover(ctx, x.group, x.url)
					if err == nil {
						rd.Failover = append(rd.Failover, s)
					}
					return err
				})
			}
		}
	}
	return steps
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress returns a reporter that redraws one status line on w when w is
// a terminal and prints nothing otherwise.
func progress(w *os.File) func(done, total int, what string) {
	if st, err := w.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func(int, int, string) {}
	}
	return func(done, total int, what string) {
		fmt.Fprintf(w, "\r\033[K%3d%%  %s", done*100/max(total, 1), what)
		if done == total {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}
