// Package faultproxy puts an in-process TCP proxy between a client and one
// server, so that a test can slow down, black-hole or cut the link to that
// server alone while the server itself keeps running.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errClosed = errors.New("faultproxy: closed")

// Proxy forwards connections from a loopback port to one upstream address.
// Its methods are safe for concurrent use. Each fault replaces the previous
// one; Heal removes it.
//
// Each accepted connection is served by a goroutine that dials upstream
// and then copies each way with two goroutines (one reads, one writes, so
// that a delayed write never stops the reading); the writer applies the
// fault in force when a chunk comes to be written. Close stops and awaits
// them all.
type Proxy struct {
	l      net.Listener
	addr   string
	ctx    context.Context // cancelled by Close: ends dials and the accept loop's pauses
	cancel context.CancelFunc
	wg     sync.WaitGroup        // the accept loop and each connection's server
	fault  atomic.Pointer[fault] // in force; replaced with mu held

	mu       sync.Mutex // serialises the changes below and protects the fields after it
	upstream string
	links    map[*link]struct{} // every connection accepted and not ended
	closed   bool
}

// fault is what the proxy does to the bytes it forwards. A fault is never
// changed: a new one replaces it, and changed is closed then, so that a
// write waiting out a latency sees the change.
type fault struct {
	kind    faultKind
	delay   time.Duration // latency's
	changed chan struct{}
}

type faultKind uint8

const (
	healthy   faultKind = iota
	latency             // replies are written delay after they were read
	blackhole           // requests are dropped
	refuse              // the next byte either way resets the connection
)

// New starts a proxy on a free loopback port, forwarding to upstream
// (host:port). The caller must Close it.
func New(upstream string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{l: l, addr: l.Addr().String(), upstream: upstream, links: map[*link]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.fault.Store(&fault{kind: healthy, changed: make(chan struct{})})
	p.wg.Go(p.accept)
	return p, nil
}

// Start is New for tests: it calls t.Fatalf on failure and registers Close
// with t.Cleanup.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listening address, "127.0.0.1:PORT". It stays the
// same, and the port stays the proxy's, until Close.
func (p *Proxy) Addr() string { return p.addr }

// Latency delays every byte the server sends back by d; requests reach the
// server at once, so commands are applied on time and only their replies
// are late. The delay counts from when the proxy read the bytes.
func (p *Proxy) Latency(d time.Duration) error {
	return p.set(fault{kind: latency, delay: d})
}

// Blackhole drops every byte sent to the server, on open connections and
// new ones alike, and keeps the connections open: requests are never
// applied and never answered.
//
// Healing a black hole (Heal, or another fault) closes the connections it
// held: requests sent into it are lost, as they would be on a real link.
func (p *Proxy) Blackhole() error {
	return p.set(fault{kind: blackhole})
}

// Refuse cuts every connection, open or new, at its next byte either way
// (a reset, discarding what was sent), as a server that is down would:
// nothing reaches the server. A new connection is accepted, never dialled
// upstream, and reset at its first byte (a reset at once could fail the
// client's connect itself). The proxy keeps listening, so that its port is
// never free for another process to take: a client of a refused proxy must
// never reach someone else's server (closing the listener let the kernel
// hand the port to any test that asked for a free one).
func (p *Proxy) Refuse() error {
	return p.set(fault{kind: refuse})
}

// Heal removes the current fault.
func (p *Proxy) Heal() error {
	return p.set(fault{kind: healthy})
}

// Redirect cuts every connection and forwards new ones to upstream: the
// proxy's address now reaches another server, as after a change of DNS
// record or virtual IP, or a port another process took. The current fault
// stays; so does the proxy's port.
func (p *Proxy) Redirect(upstream string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	p.upstream = upstream
	p.cutAll(false)
	return nil
}

// Close removes any fault, stops listening, closes every connection and
// waits for the proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.l.Close()
		p.cancel()
		p.cutAll(false)
		p.replace(fault{kind: healthy})
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// set replaces the fault. A black hole's connections are closed first:
// their requests were dropped, so their replies would answer the wrong
// requests.
func (p *Proxy) set(f fault) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if p.fault.Load().kind == blackhole {
		p.cutAll(false)
	}
	p.replace(f)
	return nil
}

// replace installs f and tells the writers waiting on the old fault.
// p.mu is held.
func (p *Proxy) replace(f fault) {
	f.changed = make(chan struct{})
	close(p.fault.Swap(&f).changed)
}

// cutAll closes every connection. p.mu is held.
func (p *Proxy) cutAll(reset bool) {
	for l := range p.links {
		l.cut(reset)
	}
}

// accept serves each connection until the listener is closed.
func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, or an aborted handshake: try
			// again shortly, unless closed.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve dials upstream for client and copies between them until either
// side closes or the link is cut.
func (p *Proxy) serve(client net.Conn) {
	l := &link{p: p, client: client, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	p.links[l] = struct{}{}
	upstream := p.upstream
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()

	var first []byte
	if p.fault.Load().kind == refuse {
		// Reset at its first byte, as an open connection would be: reset
		// at once, the client's connect itself could fail. Nothing is
		// dialled unless the fault is gone by then.
		buf := make([]byte, 32<<10)
		n, err := client.Read(buf)
		if err != nil {
			l.cut(false)
			return
		}
		if p.fault.Load().kind == refuse {
			l.cut(true)
			return
		}
		first = buf[:n]
	}
	var d net.Dialer
	server, err := d.DialContext(p.ctx, "tcp", upstream)
	if err != nil {
		l.cut(false) // as the upstream did
		return
	}
	p.mu.Lock()
	select {
	case <-l.done: // cut while dialling (Close, Redirect, a black hole's end)
		p.mu.Unlock()
		_ = server.Close()
		return
	default:
		l.server = server
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	l.pipe(&wg, client, server, first, true)
	l.pipe(&wg, server, client, nil, false)
	wg.Wait()
}

// link is one connection through the proxy.
type link struct {
	p      *Proxy
	client net.Conn
	server net.Conn      // nil until dialled; set with p.mu held
	done   chan struct{} // closed by cut
	once   sync.Once
}

// cut closes both ends of the link; with withReset, as a TCP reset that
// discards what was not sent yet. It is called with p.mu held, or by the
// goroutines of the link once its server is set.
func (l *link) cut(withReset bool) {
	l.once.Do(func() {
		close(l.done)
		for _, c := range []net.Conn{l.client, l.server} {
			if c == nil {
				continue
			}
			if withReset {
				reset(c)
			}
			_ = c.Close()
		}
	})
}

// reset makes c's Close send a TCP reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// chunk is what one read returned, and when.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, toward the server when up, with two
// goroutines counted in wg; first was read from src already. When src
// ends, what was read is written and the link is cut: either side's
// closing closes the other.
func (l *link) pipe(wg *sync.WaitGroup, src, dst net.Conn, first []byte, up bool) {
	chunks := make(chan chunk, 64)
	if first != nil {
		chunks <- chunk{b: first, at: time.Now()}
	}
	wg.Go(func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		defer l.cut(false)
		for c := range chunks {
			if !l.write(dst, c, up) {
				return
			}
		}
	})
}

// write writes c to dst under the fault in force, and reports whether the
// link still stands.
func (l *link) write(dst net.Conn, c chunk, up bool) bool {
	for {
		f := l.p.fault.Load()
		switch {
		case f.kind == refuse:
			l.cut(true)
			return false
		case f.kind == blackhole && up:
			return true // dropped
		case f.kind == latency && !up:
			if wait := time.Until(c.at.Add(f.delay)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-f.changed:
					t.Stop()
					continue // under the new fault
				case <-l.done:
					t.Stop()
					return false
				}
			}
		}
		_, err := dst.Write(c.b)
		return err == nil
	}
}
