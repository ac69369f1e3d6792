package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// echo is a server that answers every line with the same line, until the
// test ends, and counts what reaches it.
type echo struct {
	addr     string
	received atomic.Int64 // bytes
	lastRead atomic.Int64 // when the last bytes arrived, in Unix nanoseconds
}

func echoServer(t *testing.T) *echo {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.lastRead.Store(time.Now().UnixNano())
						e.received.Add(int64(n))
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and waits for its echo for at most wait; it
// returns how long the echo took, or an error.
func (c *client) roundTrip(wait time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.c.SetDeadline(start.Add(wait))
	if _, err := c.c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("bad echo " + line)
	}
	return time.Since(start), nil
}

func TestFaults(t *testing.T) {
	srv := echoServer(t)
	p := faultproxy.Start(t, srv.addr)
	c := dial(t, p.Addr())
	if _, err := c.roundTrip(5 * time.Second); err != nil {
		t.Fatalf("through a healthy proxy: %v", err)
	}

	const latency = 300 * time.Millisecond
	if err := p.Latency(latency); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if took, err := c.roundTrip(5 * time.Second); err != nil || took < latency {
		t.Fatalf("with latency %v: echo after %v, %v", latency, took, err)
	}
	if arrived := time.Unix(0, srv.lastRead.Load()).Sub(sent); arrived > latency/2 {
		t.Errorf("with latency %v: the request reached the server after %v, want at once", latency, arrived)
	}

	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	before := srv.received.Load()
	var ne net.Error
	if _, err := c.roundTrip(200 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("black-holed: %v, want a timeout", err)
	}
	held := dial(t, p.Addr())
	if _, err := held.roundTrip(200 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("black-holed, new connection: %v, want a timeout", err)
	}
	if got := srv.received.Load(); got != before {
		t.Errorf("black-holed: %d bytes reached the server", got-before)
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	// The connections the black hole held are closed: their requests were
	// lost.
	for _, old := range []*client{c, held} {
		_ = old.c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := old.r.ReadString('\n'); errors.As(err, &ne) && ne.Timeout() || err == nil {
			t.Fatalf("healed black hole, a connection it held: read %v, want it closed", err)
		}
	}
	c = dial(t, p.Addr())
	if _, err := c.roundTrip(5 * time.Second); err != nil {
		t.Fatalf("healed black hole, new connection: %v", err)
	}
	addr := p.Addr()
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	before = srv.received.Load()
	if _, err := dial(t, addr).roundTrip(5 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("refused: a new connection's round trip: %v, want connection reset", err)
	}
	if _, err := c.roundTrip(5 * time.Second); err == nil {
		t.Fatal("refused: an open connection still works")
	}
	if got := srv.received.Load(); got != before {
		t.Errorf("refused: %d bytes reached the server", got-before)
	}
	// The port stays the proxy's: a server started meanwhile by another
	// test must not take it, or the "refused" client would reach it.
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Fatalf("refused: another listener took the proxy's port %s", addr)
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, p.Addr())
	}
	if _, err := dial(t, p.Addr()).roundTrip(5 * time.Second); err != nil {
		t.Fatalf("healed: %v", err)
	}
	p.Close()
	p.Close()
	if err := p.Heal(); err == nil {
		t.Fatal("Heal after Close succeeded")
	}
}

// TestLatencyPipelines: replies read one after the other are each
// delayed by the latency from when they were read, not after the
// previous one's delay (which would take n latencies).
func TestLatencyPipelines(t *testing.T) {
	srv := echoServer(t)
	p := faultproxy.Start(t, srv.addr)
	const latency, n = 200 * time.Millisecond, 5
	if err := p.Latency(latency); err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	for i := range n {
		if _, err := c.c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		// Once it reached the server, so that each reply is a read of its own.
		for srv.received.Load() < int64(5*(i+1)) && time.Since(start) < latency {
			runtime.Gosched()
		}
	}
	for range n {
		if _, err := c.r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < latency || took >= (n-1)*latency {
		t.Errorf("%d echoes took %v, want about one latency %v, not %d of them", n, took, latency, n)
	}
}

// TestCloseAwaitsGoroutines: once Close returns, none of the proxy's
// goroutines is left, whatever the fault and the connections were.
func TestCloseAwaitsGoroutines(t *testing.T) {
	srv := echoServer(t)
	for _, fault := range []string{"none", "latency", "blackhole", "refuse"} {
		p, err := faultproxy.New(srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		open := dial(t, p.Addr())
		if _, err := open.roundTrip(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		switch fault {
		case "latency":
			err = p.Latency(time.Hour)
		case "blackhole":
			err = p.Blackhole()
		case "refuse":
			err = p.Refuse()
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = open.c.Write([]byte("ping\n")) // held by the fault
		pending := dial(t, p.Addr())          // accepted under the fault
		_, _ = pending.c.Write([]byte("ping\n"))
		p.Close()
		if left := proxyGoroutines(); left != "" {
			t.Errorf("%s: goroutines left after Close:\n%s", fault, left)
		}
	}
}

// proxyGoroutines returns the stacks of the goroutines running this
// package's code (other than its tests').
func proxyGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "faultproxy.(*") || strings.Contains(g, "faultproxy.New") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// nameServer greets every connection with its name, until the test ends.
func nameServer(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name + "\n"))
			_ = c.Close()
		}
	})
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	return l.Addr().String()
}

// TestRedirect: after Redirect, the proxy's address, the same as before,
// reaches the other server; the connections open before are cut, and the
// fault stays.
func TestRedirect(t *testing.T) {
	p := faultproxy.Start(t, nameServer(t, "a"))
	greeting := func() (*client, string) {
		c := dial(t, p.Addr())
		_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
		return c, line
	}
	open, got := greeting()
	if got != "a\n" {
		t.Fatalf("before Redirect: greeted %q, want a", got)
	}
	addr := p.Addr()
	if err := p.Redirect(nameServer(t, "b")); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, p.Addr())
	}
	var ne net.Error
	if _, err := open.r.ReadString('\n'); errors.As(err, &ne) && ne.Timeout() || err == nil {
		t.Fatalf("after Redirect, a connection open before: read %v, want it cut", err)
	}
	if _, got := greeting(); got != "b\n" {
		t.Fatalf("after Redirect: greeted %q, want b", got)
	}
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if err := p.Redirect(nameServer(t, "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, p.Addr()).roundTrip(5 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("refused, then redirected: %v, want connection reset", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, got := greeting(); got != "c\n" {
		t.Fatalf("after Redirect and Heal: greeted %q, want c", got)
	}
}
