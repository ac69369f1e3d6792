package torture

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"
	_ "github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	_ "github.com/dsync-dev/dsync/redlock"
	"github.com/dsync-dev/dsync/tests/pgtest"
)

func TestMain(m *testing.M) {
	proc.RunIfWorker()
	// The scenarios spend their time waiting on timers (TTLs, quarantine,
	// worker start-up), not on the CPU: run 4 at a time, not GOMAXPROCS,
	// unless -test.parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	leakcheck.VerifyTestMain(stopShared{m})
}

// stopShared runs the tests, then stops the server they shared (see pg),
// before leakcheck looks for goroutines left behind.
type stopShared struct{ m *testing.M }

func (s stopShared) Run() int {
	code := s.m.Run()
	if err := pg.close(); err != nil {
		fmt.Fprintf(os.Stderr, "torture: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// pg is the PostgreSQL server of the scenarios whose store is "postgres":
// one for the package, started by the first of them (initdb and the start
// take seconds) and stopped after the tests (stopShared); each scenario
// writes to a database of its own.
var pg sharedPostgres

type sharedPostgres struct {
	mu  sync.Mutex // protects srv and err
	srv *pgtest.Server
	err error // the start's error, which every later call returns
}

// server returns the package's PostgreSQL server, starting it on the first
// call. On failure, missing binaries included, it fails t with the error
// (pgtest.ErrNotInstalled says what to install): tests never skip for lack
// of PostgreSQL.
func (p *sharedPostgres) server(t *testing.T) *pgtest.Server {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil && p.err == nil {
		// Not t's context: the server outlives the test that starts it.
		p.srv, p.err = pgtest.StartServer(context.Background())
	}
	if p.err != nil {
		t.Fatalf("%v", p.err)
	}
	return p.srv
}

// close stops the server, if it was started.
func (p *sharedPostgres) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return nil
	}
	return p.srv.Close()
}

// Bounds of the scenarios' waits: generous, for two busy cores under the
// race detector.
const (
	readyTimeout = 30 * time.Second
	stepTimeout  = 20 * time.Second
	stopTimeout  = 20 * time.Second
)

// env is one scenario's harness, fenced store and bookkeeping.
type env struct {
	t     *testing.T
	ctx   context.Context
	h     *Harness
	store *Store
	addr  string // the store's address (see OpenStore)
	n     int    // workers started
}

// newEnv is newEnvOn with the store on a redis-server.
func newEnv(t *testing.T) *env { return newEnvOn(t, "redis") }

// newEnvOn starts a scenario's harness, with its fenced store of kind
// "redis" (a redis-server, written through fence.Redis), "etcd" (a
// one-member etcd, written through etcdfence), "postgres" (a new database
// on the package's PostgreSQL server) or "sqlite" (a new file), the last
// two written through fence.SQL.
func newEnvOn(t *testing.T, kind string) *env {
	t.Helper()
	var addr string
	switch kind {
	case "redis":
		addr = redistest.Start(t, nil).Addr()
	case "etcd":
		addr = EtcdStore + strings.Join(etcdtest.Start(t, nil).Endpoints(), ",")
	case "postgres":
		addr = pg.server(t).NewDatabase(t)
	case "sqlite":
		addr = SQLiteStore + filepath.Join(t.TempDir(), "store.db")
	default:
		t.Fatalf("unknown store %q", kind)
	}
	store, err := OpenStore(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// Once, here: the workers only write.
	if err := store.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	spawn := func(role, url string, args map[string]string) (*proc.Worker, error) {
		return proc.Start(t, role, url, args), nil
	}
	e := &env{t: t, ctx: t.Context(), h: New(spawn, store), store: store, addr: addr}
	// Stops what a failed scenario left running; after a finished one it
	// does nothing.
	t.Cleanup(func() { e.h.Stop(context.Background(), stopTimeout) })
	return e
}

var keyChars = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// key is a key unique to the test.
func key(t *testing.T) string { return keyChars.ReplaceAllString(t.Name(), "-") }

// start starts n workers on url with cfg (ID set per worker).
func (e *env) start(n int, url string, cfg WorkerConfig) []*Worker {
	e.t.Helper()
	var ws []*Worker
	for range n {
		c := cfg
		c.ID = fmt.Sprintf("w%d", e.n)
		c.Store = e.addr
		e.n++
		w, err := e.h.Start(url, c)
		if err != nil {
			e.t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return ws
}

func (e *env) ready() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, readyTimeout)
	defer cancel()
	if err := e.h.AwaitReady(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// await waits for an event at or after from that matches.
func (e *env) await(from int, match func(proc.Event) bool, what string) (proc.Event, int) {
	e.t.Helper()
	return e.awaitWithin(from, match, what, stepTimeout)
}

// awaitWithin is await with a bound other than stepTimeout.
func (e *env) awaitWithin(from int, match func(proc.Event) bool, what string, timeout time.Duration) (proc.Event, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	ev, next, err := e.h.Await(ctx, from, match)
	if err != nil {
		e.dump()
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
	return ev, next
}

// dump logs the events recorded so far, for a scenario that failed.
func (e *env) dump() {
	ids := map[int]string{}
	for _, w := range e.h.Workers() {
		ids[w.Index()] = w.ID()
	}
	evs := e.h.Events()
	var b strings.Builder
	for _, ev := range evs[max(0, len(evs)-60):] {
		fmt.Fprintf(&b, "  %d.%03d %s %s %v\n", ev.At/time.Second, ev.At%time.Second/time.Millisecond, ids[ev.Worker], ev.Name, ev.Fields)
	}
	for _, sp := range e.h.Spans() {
		fmt.Fprintf(&b, "  fault %s injected %v healed %v\n", sp.Name(), sp.Injected, sp.Healed)
	}
	e.t.Logf("the last events:\n%s", b.String())
}

// awaitCount waits for n events at or after from that match.
func (e *env) awaitCount(from, n int, match func(proc.Event) bool, what string) int {
	e.t.Helper()
	for range n {
		_, from = e.await(from, match, what)
	}
	return from
}

func (e *env) inject(f Fault) *Injection {
	e.t.Helper()
	in, err := e.h.Inject(e.ctx, f)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *env) heal(in *Injection) {
	e.t.Helper()
	if err := e.h.Heal(e.ctx, in); err != nil {
		e.t.Fatal(err)
	}
}

// finish stops the workers, checks that nothing stays held on key (if b
// is not nil) and runs the checks.
func (e *env) finish(prim, key string, spec Spec, b *dsync.Backend) *Report {
	e.t.Helper()
	left := e.h.Stop(e.ctx, stopTimeout)
	if b != nil {
		CheckReleased(e.ctx, left, b, key, spec.TTL+5*time.Second)
	}
	rep, err := e.h.Check(e.ctx, Resource(prim, key), spec, left)
	if err != nil {
		e.t.Fatal(err)
	}
	rep.Title = e.t.Name()
	var buf bytes.Buffer
	rep.WriteText(&buf)
	e.t.Log("\n" + buf.String())
	return rep
}

// wantOK fails the test unless every check passed.
func wantOK(t *testing.T, rep *Report) {
	t.Helper()
	if !rep.OK() {
		t.Errorf("checks failed: %v", rep.Failed())
	}
}

// wantViolation fails the test unless check found a violation: a
// negative control.
func wantViolation(t *testing.T, rep *Report, check string) *Result {
	t.Helper()
	r := rep.Result(check)
	if r == nil || r.OK() {
		t.Errorf("negative control: the %s check found no violation in a setup built to violate it", check)
		return r
	}
	t.Logf("negative control: %s found %d violations, as it must: %s", check, r.Count(), r.Violations[0])
	return r
}
