package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
			wg.Go(func() { _, _ = io.Copy(c, c) })
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
	return l.Addr().String()
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
	p := faultproxy.Start(t, echoServer(t))
	c := dial(t, p.Addr())
	if _, err := c.roundTrip(5 * time.Second); err != nil {
		t.Fatalf("through a healthy proxy: %v", err)
	}

	const latency = 300 * time.Millisecond
	if err := p.Latency(latency); err != nil {
		t.Fatal(err)
	}
	if took, err := c.roundTrip(5 * time.Second); err != nil || took < latency {
		t.Fatalf("with latency %v: echo after %v, %v", latency, took, err)
	}

	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.roundTrip(200 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("black-holed: %v, want a timeout", err)
	}
	if _, err := dial(t, p.Addr()).roundTrip(200 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("black-holed, new connection: %v, want a timeout", err)
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	c = dial(t, p.Addr())
	if _, err := c.roundTrip(5 * time.Second); err != nil {
		t.Fatalf("healed black hole, new connection: %v", err)
	}
	addr := p.Addr()
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, addr).roundTrip(5 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("refused: a new connection's round trip: %v, want connection reset", err)
	}
	if _, err := c.roundTrip(5 * time.Second); err == nil {
		t.Fatal("refused: an open connection still works")
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
// reaches the other server.
func TestRedirect(t *testing.T) {
	p := faultproxy.Start(t, nameServer(t, "a"))
	greeting := func() string {
		c := dial(t, p.Addr())
		_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
		return line
	}
	if got := greeting(); got != "a\n" {
		t.Fatalf("before Redirect: greeted %q, want a", got)
	}
	addr := p.Addr()
	if err := p.Redirect(nameServer(t, "b")); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, p.Addr())
	}
	if got := greeting(); got != "b\n" {
		t.Fatalf("after Redirect: greeted %q, want b", got)
	}
}
