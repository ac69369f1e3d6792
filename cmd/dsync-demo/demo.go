package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// demoTTL is the lease TTL of the contention and the election; the Redlock
// URL's max_ttl is just above it so that a restarted master's quarantine
// is short. staleTTL is the TTL the paused holder outlives.
const (
	demoTTL    = 2 * time.Second
	demoMaxTTL = 3 * time.Second
	staleTTL   = time.Second
)

type demoConfig struct {
	key            string
	workers, round int
	work           time.Duration
	size           int       // permits of the semaphore part
	res            *resource // what the stale write's holders write to
}

// stage is one backend the story runs on.
type stage struct {
	name    string // in the summary: "Redlock"
	heading string // "Redlock: 5 masters, quorum 3, max_ttl 3s"
	url     string
	// prepare runs after the backend is open, before the workers start.
	prepare func(ctx context.Context, b *dsync.Backend, s *story) error
	// faults runs last, and may break the backend's servers.
	faults func(ctx context.Context, b *dsync.Backend, s *story, r *backendReport)
}

// story prints the demo: one line per step, prefixed by the time since the
// demo started, and with -v every acquire and release as an event.
type story struct {
	out     io.Writer
	start   time.Time
	verbose bool
	mu      sync.Mutex // serializes the output
}

func (s *story) since() time.Duration { return time.Since(s.start) }

func (s *story) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "%6.1fs  "+format+"\n", append([]any{s.since().Seconds()}, args...)...)
}

func (s *story) event(format string, args ...any) {
	if !s.verbose {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "%8.3fs      "+format+"\n", append([]any{s.since().Seconds()}, args...)...)
}

// backendReport is one backend's line of the summary, and its checks.
type backendReport struct {
	name               string
	checks, passed     int
	acquisitions       int
	longestWait        time.Duration
	handover, failover time.Duration
	stale              string   // what became of the stale write
	faults             []string // one short phrase per fault
	s                  *story
}

// check counts one check, and says why when it failed.
func (r *backendReport) check(name string, ok bool, detail string) {
	r.checks++
	if ok {
		r.passed++
		return
	}
	r.s.say("FAILED: %s: %s", name, detail)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("dsync-demo", stdout, stderr, "usage: dsync-demo [flags]\n       dsync-demo check [flags]   (the soak; see dsync-demo check --help)\n\n"+
		"Tells, in about a screen, what dsync does on each backend: workers contending for a lock and a semaphore,\n"+
		"an election with a hand-over and a failover, a paused holder whose late write its fencing token refuses,\n"+
		"and faults: Redlock masters killed and restarted (the restart quarantine), the etcd leader killed, Redis\n"+
		"restarted empty. Without --url it starts single Redis, Redlock (5 masters) and a 3-member etcd itself,\n"+
		"installing redis-server with apt-get first when it is missing and this runs as root (--no-install skips\n"+
		"that; the memory backend then stands in for Redis). -v shows every acquisition and release.")
	urlOf := urlFlag(fs, "backend URL (default: start the servers here)")
	var cfg demoConfig
	fs.IntVar(&cfg.workers, "workers", 4, "number of contending workers")
	fs.IntVar(&cfg.round, "rounds", 5, "acquisitions per worker")
	fs.DurationVar(&cfg.work, "work", 40*time.Millisecond, "time spent holding the lock each round")
	fs.StringVar(&cfg.key, "key", "demo/report", "lock name (the semaphore is NAME-pool)")
	fs.IntVar(&cfg.size, "size", 2, "permits of the semaphore the workers share")
	verbose := fs.Bool("v", false, "print every acquisition, release and term")
	noInstall := fs.Bool("no-install", false, "never install redis-server, even as root with apt-get")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	url := urlOf()
	if cfg.workers < 1 || cfg.round < 1 || cfg.work < 0 || cfg.size < 1 {
		fmt.Fprintln(stderr, "dsync-demo: --workers, --rounds and --size must be at least 1, --work not negative")
		return exitUsage
	}
	s := &story{out: stdout, start: time.Now(), verbose: *verbose}

	var (
		stages  []stage
		skipped string // why Redlock and single Redis do not appear
	)
	if url != "" {
		scheme, _, _ := strings.Cut(url, ":")
		stages = []stage{{name: scheme, heading: redacted(url), url: url}}
	} else {
		fmt.Fprintln(stdout, "dsync-demo: locks, semaphores and leader election on single Redis, Redlock and etcd, under faults, on servers started here")
		skipped = ensureRedis(ctx, stdout, *noInstall)
		if skipped != "" {
			fmt.Fprintln(stdout, skipped+"; memory stands in for Redis")
		}
		e, cleanup, code := startEmbedded(ctx, stdout, stderr, skipped == "")
		defer cleanup()
		if code != exitOK {
			return code
		}
		stages = defaultStages(e)
	}

	var reports []*backendReport
	for _, st := range stages {
		fmt.Fprintf(stdout, "\n== %s ==\n", st.heading)
		b, code := openBackend(ctx, st.url, stderr)
		if code != exitOK {
			return code
		}
		if cfg.res == nil {
			res, err := startResource(ctx)
			if err != nil {
				b.Close()
				fmt.Fprintf(stderr, "dsync-demo: starting the resource the locks protect: %s\n", oneLine(err))
				return exitFail
			}
			defer res.close()
			cfg.res = res
			s.say("the resource the locks protect: %s", res.what)
		}
		r, err := runStage(ctx, b, st, cfg, s)
		b.Close()
		if err != nil {
			fmt.Fprintf(stderr, "dsync-demo: %s: %s\n", st.name, oneLine(err))
			return exitFail
		}
		reports = append(reports, r)
	}
	if ok := printSummary(stdout, reports, skipped, s.since()); !ok {
		return exitFail
	}
	return exitOK
}

// defaultStages returns the story's stages on the servers started here.
func defaultStages(e *embedded) []stage {
	etcd := stage{name: "etcd", heading: "etcd: 3 members (raft); the fence is the key's create revision", url: e.cluster.URL(), faults: etcdFaults(e.cluster)}
	if e.single == nil {
		return []stage{{name: "memory", heading: "memory (in-process, standing in for Redis)", url: "memory://demo"}, etcd}
	}
	return []stage{
		{name: "single Redis", heading: "single Redis: one redis-server, no persistence", url: e.single.URL(), faults: redisFaults(e.single)},
		{name: "Redlock", heading: fmt.Sprintf("Redlock: 5 independent masters, quorum 3, max_ttl %v", demoMaxTTL), url: e.redlockURL(),
			prepare: waitQuarantine, faults: redlockFaults(e.masters)},
		etcd,
	}
}

// runStage tells one backend's story on b, opened from st.url. An error means an operation failed
// outright (a violation is a failed check instead).
func runStage(ctx context.Context, b *dsync.Backend, st stage, cfg demoConfig, s *story) (*backendReport, error) {
	r := &backendReport{name: st.name, s: s}
	s.event("backend: %s", b)
	if st.prepare != nil {
		if err := st.prepare(ctx, b, s); err != nil {
			return nil, err
		}
	}

	l, err := locker.New(b, cfg.key, &locker.Options{TTL: demoTTL})
	if err != nil {
		return nil, err
	}
	res, err := contend(ctx, l, "lock", cfg, s)
	if err != nil {
		return nil, err
	}
	row := res.check(cfg.workers, 1)
	r.acquisitions += row.acquisitions
	r.longestWait = max(r.longestWait, row.maxWait)
	s.say("lock: %d workers, %d acquisitions, %s, %s, longest wait %v", cfg.workers, row.acquisitions,
		plural(row.overlaps, "overlap", "no overlap"), tokensPhrase(row.badTokens), row.maxWait.Round(time.Millisecond))
	r.check("lock: one holder at a time", row.overlaps == 0, strings.Join(row.violations, "; "))
	r.check("lock: tokens increasing", row.badTokens == 0, fmt.Sprintf("%d tokens did not grow", row.badTokens))

	pool := cfg.key + "-pool"
	sem, err := semaphore.New(b, pool, cfg.size, &semaphore.Options{TTL: demoTTL})
	if err != nil {
		return nil, err
	}
	res, err = contend(ctx, semAcquirer{sem}, "permit", cfg, s)
	if err != nil {
		return nil, err
	}
	row = res.check(cfg.workers, cfg.size)
	r.acquisitions += row.acquisitions
	r.longestWait = max(r.longestWait, row.maxWait)
	s.say("semaphore of %d permits: %d workers, %d acquisitions, at most %d holders at once, longest wait %v",
		cfg.size, cfg.workers, row.acquisitions, row.maxInside, row.maxWait.Round(time.Millisecond))
	r.check("semaphore: bound kept", row.ok(), strings.Join(row.violations, "; "))

	row, err = elections(ctx, st.url, cfg, s)
	if err != nil {
		return nil, err
	}
	r.handover, r.failover = row.handover, row.failover
	s.say("election: 3 candidates, %d terms, one leader at a time; hand-over %v, failover %v after a crash (ttl %v)",
		row.acquisitions, roundDur(row.handover), roundDur(row.failover), demoTTL)
	r.check("election: one leader per term, terms increasing", row.ok(), strings.Join(row.violations, "; "))

	staleWrite(ctx, b, st.url, cfg.key+"-stale", cfg.res, s, r)

	if st.faults != nil {
		st.faults(ctx, b, s, r)
	}
	return r, nil
}

// waitQuarantine waits out the restart quarantine of freshly started
// Redlock masters (usually over by the time the story reaches Redlock).
func waitQuarantine(ctx context.Context, b *dsync.Backend, s *story) error {
	if !anyQuarantined(ctx, b) {
		return nil
	}
	start := time.Now()
	for anyQuarantined(ctx, b) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.say("the masters started less than max_ttl (%v) ago, so none voted yet: waited %v", demoMaxTTL, roundDur(time.Since(start)))
	return nil
}

// anyQuarantined reports whether b's health report has a node in restart
// quarantine (only Redlock's nodes ever are).
func anyQuarantined(ctx context.Context, b *dsync.Backend) bool {
	h, err := b.Health(ctx)
	if err != nil {
		return false
	}
	now := time.Now()
	for _, n := range h.Nodes {
		if n.QuarantinedUntil.After(now) {
			return true
		}
	}
	return false
}

// printSummary prints the table of the backends and reports whether every
// check passed.
func printSummary(out io.Writer, reports []*backendReport, skipped string, took time.Duration) bool {
	fmt.Fprintf(out, "\n== summary ==\n%-13s %-7s %6s %8s %9s %9s  %-8s %s\n",
		"backend", "checks", "grants", "max wait", "hand-over", "failover", "stale", "faults")
	checks, passed := 0, 0
	for _, r := range reports {
		checks, passed = checks+r.checks, passed+r.passed
		faults := strings.Join(r.faults, "; ")
		if faults == "" {
			faults = "-"
		}
		fmt.Fprintf(out, "%-13s %-7s %6d %8v %9v %9v  %-8s %s\n", r.name, fmt.Sprintf("%d/%d", r.passed, r.checks),
			r.acquisitions, r.longestWait.Round(time.Millisecond), roundDur(r.handover), roundDur(r.failover), r.stale, faults)
	}
	if skipped != "" {
		fmt.Fprintln(out, skipped)
	}
	if passed == checks {
		fmt.Fprintf(out, "all %d checks passed in %v\n", checks, took.Round(100*time.Millisecond))
		return true
	}
	fmt.Fprintf(out, "FAILED: %d of %d checks (see FAILED above), in %v\n", checks-passed, checks, took.Round(100*time.Millisecond))
	return false
}

func plural(n int, one, none string) string {
	switch n {
	case 0:
		return none
	case 1:
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

func tokensPhrase(bad int) string {
	if bad == 0 {
		return "tokens increasing"
	}
	return fmt.Sprintf("%d tokens NOT increasing", bad)
}

// roundDur keeps two or three significant digits.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// redacted is rawURL with its password hidden, for a heading printed before
// the backend is opened (a *dsync.Backend's String redacts secret query
// options too).
func redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		scheme, _, _ := strings.Cut(rawURL, ":")
		return scheme + "://(unparsable URL)"
	}
	return u.Redacted()
}
