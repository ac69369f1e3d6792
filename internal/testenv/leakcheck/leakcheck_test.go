package leakcheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// childEnv makes the test binary a child run by TestVerifyTestMain: "leak"
// leaves a goroutine blocked for good, "late" one that ends after the
// tests, within settle.
const childEnv = "LEAKCHECK_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		settle = 2 * time.Second
	}
	VerifyTestMain(m)
}

// blocked waits for stop: a goroutine whose stack the tests look for.
func blocked(stop <-chan struct{}) { <-stop }

var blockedName = runtime.FuncForPC(reflect.ValueOf(blocked).Pointer()).Name()

// TestChild is the child's only test: it leaves a goroutine behind.
func TestChild(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "leak":
		go blocked(make(chan struct{})) // never closed
	case "late":
		stop := make(chan struct{})
		go blocked(stop)
		time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	default:
		t.Skip("run by TestVerifyTestMain")
	}
}

// TestVerifyTestMain runs the test binary as a child whose test leaves a
// goroutine blocked: the run fails and prints its stack. A goroutine
// that ends within settle is no leak.
func TestVerifyTestMain(t *testing.T) {
	for _, c := range []struct {
		child string
		fails bool
	}{{"leak", true}, {"late", false}} {
		t.Run(c.child, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+c.child)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			switch {
			case c.fails && !errors.As(err, &exit):
				t.Fatalf("child with a leaked goroutine: %v, want exit status 1\n%s", err, stderr.String())
			case c.fails && exit.ExitCode() != 1:
				t.Fatalf("child with a leaked goroutine: exit status %d, want 1\n%s", exit.ExitCode(), stderr.String())
			case !c.fails && err != nil:
				t.Fatalf("child whose goroutine ends in time: %v\n%s", err, stderr.String())
			}
			out := stderr.String()
			if c.fails && (!strings.Contains(out, "leakcheck: goroutines left after the tests: 1\n") || !strings.Contains(out, blockedName+"(")) {
				t.Errorf("the report lacks the count or %s:\n%s", blockedName, out)
			}
			if !c.fails && strings.Contains(out, "leakcheck") {
				t.Errorf("a report for no leak:\n%s", out)
			}
		})
	}
}

// TestLeaks: in a test, with a goroutine blocked, leaks finds it; the
// testing package's goroutines and the caller's are not leaks, and once
// the goroutine ends there are none.
func TestLeaks(t *testing.T) {
	// The goroutine of the previous test may still be ending.
	if leaked := wait(5 * time.Second); len(leaked) != 0 {
		t.Fatalf("before: leaks = %v, want none", leaked)
	}
	stop := make(chan struct{})
	go blocked(stop)
	// Until the goroutine has started and blocked.
	var found []goroutine
	for deadline := time.Now().Add(5 * time.Second); len(found) == 0 && time.Now().Before(deadline); runtime.Gosched() {
		found = slices.DeleteFunc(leaks(), func(g goroutine) bool {
			return g.top() != blockedName || !strings.HasPrefix(g.state, "chan receive")
		})
	}
	if len(found) != 1 {
		t.Errorf("leaks = %+v, want one goroutine blocked in %s", leaks(), blockedName)
	}
	close(stop)
	if leaked := wait(5 * time.Second); len(leaked) != 0 {
		t.Errorf("after the goroutine ended: leaks = %+v, want none", leaked)
	}
}

// TestParse reads a dump with a frame list cut short, a creator with its
// ancestors and a header with a duration.
func TestParse(t *testing.T) {
	const dump = `goroutine 1 [running]:
main.main()
	/src/main.go:10 +0x1d

goroutine 34 [select, 2 minutes]:
go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1({0x1, 0x2}, 0xc000)
	/src/peer.go:80 +0x5a
net/http.HandlerFunc.ServeHTTP(...)
	/src/server.go:2294
...additional frames elided...
created by net/http.(*Server).Serve in goroutine 12
	/src/server.go:3454 +0x485
[originating from goroutine 12]:
example.com/ancestor.fn(...)
	/src/a.go:1
`
	gs := parse(dump)
	if len(gs) != 2 {
		t.Fatalf("parsed %d goroutines, want 2: %+v", len(gs), gs)
	}
	g := gs[1]
	want := []string{etcdKilledPeerVersion, "net/http.HandlerFunc.ServeHTTP"}
	if g.id != 34 || g.state != "select, 2 minutes" || !reflect.DeepEqual(g.funcs, want) {
		t.Errorf("parsed %d [%s] %q, want 34 [select, 2 minutes] %q", g.id, g.state, g.funcs, want)
	}
	if !expected(g) || expected(gs[0]) {
		t.Errorf("expected: etcd's stuck handler %v, main %v; want true, false", expected(g), expected(gs[0]))
	}
}
