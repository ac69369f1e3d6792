package etcd

import (
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease reuse, for speed only: granting a lease and revoking it are two
// raft writes, as many as the hold itself costs, so the driver keeps the
// leases it granted and reuses them (BenchmarkLeaseReuse; the figures are
// in docs/performance.md). A lease is reused only once no key is on it,
// and is renewed by the attempt that reuses it. Nothing here is a clock, and
// nothing here answers whether a key is held: it only spares a Release the
// read of the hold, and an Acquire the grant of a lease.

const (
	// maxIdle bounds the idle leases a driver keeps; one more is revoked.
	maxIdle = 64
	// maxHeld bounds the holds a driver remembers; a hold it forgot is
	// found on the server (one more round trip) and its lease expires.
	maxHeld = 4096
)

// heldLease is a hold of the driver's on a lease it granted: the facts
// that the acquiring transaction reported.
type heldLease struct {
	lease clientv3.LeaseID
	secs  int64  // the TTL requested, in whole seconds: the pool's key
	key   string // the hold's etcd key: the lock's or its permit's
	rev   int64  // the key's create revision
}

type holdID struct{ key, token string }

// leasePool holds the driver's leases: idle ones, which no key is on, by
// requested TTL, and those of its holds, by name and token. Leases that
// fall out of it are left to expire on the server.
type leasePool struct {
	mu    sync.Mutex // protects the fields below
	idle  map[int64][]clientv3.LeaseID
	nIdle int
	held  map[holdID]heldLease
	// waiting are the leases of the driver's waiters in lines, by line
	// key; a waiter's attempt takes its entry out while it runs.
	waiting map[string]*waiting
}

func (p *leasePool) init() {
	p.idle = map[int64][]clientv3.LeaseID{}
	p.held = map[holdID]heldLease{}
	p.waiting = map[string]*waiting{}
}

// take returns an idle lease granted for secs, which the caller renews
// before use (it may have expired meanwhile).
func (p *leasePool) take(secs int64) (clientv3.LeaseID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.idle[secs]
	if len(s) == 0 {
		return 0, false
	}
	id := s[len(s)-1]
	if len(s) == 1 {
		delete(p.idle, secs)
	} else {
		p.idle[secs] = s[:len(s)-1]
	}
	p.nIdle--
	return id, true
}

// give returns a lease that no key is on to the pool, and reports false
// when the pool is full: the caller then revokes it.
func (p *leasePool) give(secs int64, id clientv3.LeaseID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nIdle >= maxIdle {
		return false
	}
	p.idle[secs] = append(p.idle[secs], id)
	p.nIdle++
	return true
}

// hold remembers the hold of key and token.
func (p *leasePool) hold(key, token string, h heldLease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.held) >= maxHeld {
		return
	}
	p.held[holdID{key, token}] = h
}

// heldBy returns the hold of key and token, if the driver remembers it.
func (p *leasePool) heldBy(key, token string) (heldLease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.held[holdID{key, token}]
	return h, ok
}

// forget forgets the hold of key and token.
func (p *leasePool) forget(key, token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.held, holdID{key, token})
}

// wait remembers the waiter whose line key is wk, and reports false when
// the pool remembers too many already. A waiting with no lease marks a
// waiter whose key may be in line on a lease the driver forgot.
func (p *leasePool) wait(wk string, w *waiting) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting) >= maxHeld {
		return false
	}
	p.waiting[wk] = w
	return true
}

// leave takes out what the pool remembers of the waiter whose line key
// is wk.
func (p *leasePool) leave(wk string) (*waiting, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.waiting[wk]
	delete(p.waiting, wk)
	return w, ok
}
