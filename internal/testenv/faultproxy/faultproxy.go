// Package faultproxy puts an in-process TCP proxy (toxiproxy) between a
// client and one server, so that a test can slow down, black-hole or cut
// the link to that server alone while the server itself keeps running.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// api is the toxiproxy server object every proxy hangs off: it only carries
// the logger and metrics the proxies use; it never listens.
var api = sync.OnceValue(func() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
})

// Proxy forwards connections from a loopback port to one upstream address.
// Its methods are safe for concurrent use. Each fault replaces the previous
// one; Heal removes it.
type Proxy struct {
	mu sync.Mutex // serialises the fault changes below
	p  *toxiproxy.Proxy
	// blackholed: the fault is Blackhole's timeout toxic. Removing it from
	// live connections can leave a goroutine of toxiproxy blocked for good
	// (the toxic's cleanup closes its stub without re-linking the one
	// before it, which may be sending), so its connections are closed
	// first.
	blackholed bool
	closed     bool
}

// New starts a proxy on a free loopback port, forwarding to upstream
// (host:port). The caller must Close it.
func New(upstream string) (*Proxy, error) {
	p := toxiproxy.NewProxy(api(), "to-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	return &Proxy{p: p}, nil
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
// same across Refuse and Heal.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p.Listen
}

// Latency delays every byte the server sends back by d; requests reach the
// server at once, so commands are applied on time and only their replies
// are late.
func (p *Proxy) Latency(d time.Duration) error {
	return p.fault(fmt.Sprintf(`{"name":"fault","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
}

// Blackhole drops every byte sent to the server, on open connections and
// new ones alike, and keeps the connections open: requests are never
// applied and never answered.
//
// Healing a black hole closes the connections it held: requests sent into
// it are lost, as they would be on a real link.
func (p *Proxy) Blackhole() error {
	if err := p.fault(`{"name":"fault","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`); err != nil {
		return err
	}
	p.mu.Lock()
	p.blackholed = true
	p.mu.Unlock()
	return nil
}

// Refuse cuts every connection, open or new, at its next byte either way
// (a reset, discarding what was sent), as a server that is down would:
// nothing reaches the server. The proxy keeps listening, so that its port
// is never free for another process to take: a client of a refused proxy
// must never reach someone else's server (closing the listener let the
// kernel hand the port to any test that asked for a free one).
func (p *Proxy) Refuse() error {
	return p.fault(
		`{"name":"refuse-up","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`,
		`{"name":"refuse-down","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`)
}

// Redirect cuts every connection and forwards new ones to upstream: the
// proxy's address now reaches another server, as after a change of DNS
// record or virtual IP, or a port another process took. The current fault
// stays. Its port is free for a moment, as in Heal after Blackhole.
func (p *Proxy) Redirect(upstream string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	p.p.Stop()
	p.p.Upstream = upstream
	if err := p.p.Start(); err != nil {
		return fmt.Errorf("faultproxy: reopen %s: %w", p.p.Listen, err)
	}
	return nil
}

// Heal removes the current fault: toxics are dropped.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	if p.blackholed {
		// Close the connections (their links end through the toxic),
		// then remove it, then listen again on the same port (free for
		// that moment only).
		p.p.Stop()
		p.p.Toxics.ResetToxics(context.Background())
		p.blackholed = false
		if err := p.p.Start(); err != nil {
			return fmt.Errorf("faultproxy: reopen %s: %w", p.p.Listen, err)
		}
		return nil
	}
	p.p.Toxics.ResetToxics(context.Background())
	return nil
}

// fault installs toxics, replacing the previous fault.
func (p *Proxy) fault(toxics ...string) error {
	if err := p.Heal(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, toxic := range toxics {
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return fmt.Errorf("faultproxy: %w", err)
		}
	}
	return nil
}

// Close removes any fault, stops listening and closes every connection.
// It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.p.Stop() // first: see blackholed
	p.p.Toxics.ResetToxics(context.Background())
}
