// Package leakcheck is the goroutine-leak check every test package runs
// from TestMain.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// settle is how long goroutines get to end after the tests: some
// dependencies end theirs only a few seconds after their owner closes:
// etcd's peer connections between members (rafthttp over net/http) close
// when etcd's 5 s read timeout expires after a member is stopped, and
// go-redis's dial prober (started after PoolSize failed dials to a dead
// node) checks for its pool's closing between one-second sleeps. What is
// still there after settle is a leak, with one exception in test tooling
// (see etcdKilledPeerVersion). A variable so that this package's tests can
// shorten it.
var settle = 10 * time.Second

// etcdKilledPeerVersion is in the stack of a goroutine of the embedded etcd
// server (test tooling, never dsync): a peer's version request served
// while the member is killed can block for good reading the storage
// version, on the lock of a backend that the kill left held (seen once in
// the torture suite, after TestEtcdMemberStopped/leader-killed).
const etcdKilledPeerVersion = "go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"

// M is what VerifyTestMain runs: a *testing.M, or a wrapper of one whose
// Run, after the tests, also stops what they shared (a server started once
// for the package), so that its goroutines are gone before the check.
type M interface{ Run() int }

var _ M = (*testing.M)(nil)

// VerifyTestMain runs the tests, then fails the run if goroutines are left
// behind once they have had settle to end.
func VerifyTestMain(m M) {
	code := m.Run()
	if code == 0 {
		if leaked := wait(settle); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines left after the tests: %d\n\n", len(leaked))
			for _, g := range leaked {
				fmt.Fprintf(os.Stderr, "%s\n\n", g.stack)
			}
			code = 1
		}
	}
	os.Exit(code)
}

// wait returns the goroutines that leak (see leaks) once they have had d
// to end, or none as soon as there are none.
func wait(d time.Duration) []goroutine {
	deadline := time.Now().Add(d)
	for {
		leaked := leaks()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		// Nothing tells when another goroutine ends: poll.
		time.Sleep(100 * time.Millisecond)
	}
}

// leaks returns every goroutine but the caller's, the runtime's and the
// testing package's, and those of the exceptions above.
func leaks() []goroutine {
	self := parse(stacks(false))[0].id
	var out []goroutine
	for _, g := range parse(stacks(true)) {
		if g.id != self && !expected(g) {
			out = append(out, g)
		}
	}
	return out
}

// expected reports whether g is one the runtime or the testing package
// keep, or a known exception: the same set as go.uber.org/goleak's
// defaults.
func expected(g goroutine) bool {
	switch g.top() {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		// The testing package's own, waiting for tests to end.
		return strings.HasPrefix(g.state, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop":
		return true // started by importing os/signal
	}
	return g.has("runtime.ensureSigM") || // signal.Notify's
		g.has("runtime.ReadTrace") || // an execution trace's (go test -trace)
		g.has("runtime.goexit") && strings.HasPrefix(g.state, "syscall") || // cgo's
		g.has(etcdKilledPeerVersion)
}

// goroutine is one goroutine of a runtime.Stack dump.
type goroutine struct {
	id    int
	state string   // "chan receive", "running", "IO wait, 2 minutes", ...
	funcs []string // its stack's functions, innermost first, without "created by"
	stack string   // as the runtime printed it
}

func (g goroutine) top() string {
	if len(g.funcs) == 0 {
		return ""
	}
	return g.funcs[0]
}

func (g goroutine) has(fn string) bool {
	for _, f := range g.funcs {
		if f == fn {
			return true
		}
	}
	return false
}

// stacks is runtime.Stack's dump of the caller's goroutine, or of all.
func stacks(all bool) string {
	for n := 64 << 10; ; n *= 2 {
		buf := make([]byte, n)
		if k := runtime.Stack(buf, all); k < n {
			return string(buf[:k])
		}
	}
}

// parse reads a dump of runtime.Stack: goroutines apart by a blank line,
// each a header "goroutine ID [STATE]:", then for each frame a line
// "pkg.fn(args)" and a line "\tfile:line +0xoff", and last "created by
// pkg.fn in goroutine N" with its file line.
func parse(dump string) []goroutine {
	var out []goroutine
	for block := range strings.SplitSeq(strings.TrimSpace(dump), "\n\n") {
		lines := strings.Split(block, "\n")
		header, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		g := goroutine{stack: block}
		id, _, _ := strings.Cut(header, " ")
		g.id, _ = strconv.Atoi(id)
		if i, j := strings.IndexByte(header, '['), strings.LastIndexByte(header, ']'); i >= 0 && j > i {
			g.state = header[i+1 : j]
		}
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "created by ") {
				break // the rest is the creator's (and its ancestors')
			}
			if l == "" || l[0] == '\t' || strings.HasPrefix(l, "...") {
				continue // a file line, or "...additional frames elided..."
			}
			if i := strings.LastIndexByte(l, '('); i > 0 {
				l = l[:i]
			}
			g.funcs = append(g.funcs, l)
		}
		out = append(out, g)
	}
	return out
}
