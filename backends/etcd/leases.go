package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The driver's memory of its holds and of its idle leases. Neither is needed
// for correctness: a hold missing from the table is read from the server
// (one more round trip), and without idle leases every Acquire grants a
// fresh one (one more raft write). Both are bounded.

const (
	// holdSlack is how long past its last renewal plus TTL a hold stays in
	// the table: a leader change can extend a lease by an election timeout.
	holdSlack = 10 * time.Second
	// minSweep is the table size below which expired holds are not swept.
	minSweep = 128
	// maxIdle bounds the idle leases a driver keeps, over all TTLs.
	maxIdle = 64
)

// hold is what the driver remembers of a hold it obtained: enough to renew
// it (lease) and to release exactly it (key and rev), and to reuse its lease
// after the release.
type hold struct {
	key   string // the etcd key: the lock's, or a semaphore holder's
	limit int    // 1 for a lock, the size for a semaphore permit
	lease clientv3.LeaseID
	rev   int64 // the key's create revision: the fencing token
	secs  int64 // the TTL requested, in whole seconds
	ttl   int64 // the TTL the server granted, in seconds
	// renewed is when the grant or the last renewal of the lease was
	// sent: the lease lives at least until renewed + ttl.
	renewed time.Time
	// releasing: a release was sent, whose outcome is unknown.
	releasing bool
}

// holdTable maps a lock's or semaphore's name and a token to the hold.
// Entries go when the hold is released or found gone, when a watch of the
// name sees its key deleted, and by a sweep, amortized over insertions, of
// entries whose lease must have expired.
type holdTable struct {
	mu        sync.Mutex                 // protects the fields below
	m         map[string]map[string]hold // by key, then token
	n         int                        // entries in m
	nextSweep int
}

func (t *holdTable) init() {
	t.m = map[string]map[string]hold{}
	t.nextSweep = minSweep
}

// expired reports whether h's lease must have expired by now.
func (h hold) expired(now time.Time) bool {
	return now.After(h.renewed.Add(time.Duration(h.ttl)*time.Second + holdSlack))
}

// alive reports whether h's lease is alive at now for sure.
func (h hold) alive(now time.Time) bool {
	return now.Before(h.renewed.Add(time.Duration(h.ttl) * time.Second))
}

func (t *holdTable) put(key, token string, h hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n >= t.nextSweep {
		now := time.Now()
		for k, byToken := range t.m {
			for tok, old := range byToken {
				if old.expired(now) {
					t.deleteLocked(k, tok)
				}
			}
		}
		t.nextSweep = max(2*t.n, minSweep)
	}
	byToken := t.m[key]
	if byToken == nil {
		byToken = map[string]hold{}
		t.m[key] = byToken
	}
	if _, ok := byToken[token]; !ok {
		t.n++
	}
	byToken[token] = h
}

// deleteLocked removes an entry. t.mu must be held.
func (t *holdTable) deleteLocked(key, token string) {
	byToken := t.m[key]
	if _, ok := byToken[token]; !ok {
		return
	}
	delete(byToken, token)
	t.n--
	if len(byToken) == 0 {
		delete(t.m, key)
	}
}

func (t *holdTable) get(key, token string) (hold, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.m[key][token]
	return h, ok
}

// held reports whether the driver has a lock hold on key whose lease is
// alive for sure at now, and that is not being released.
func (t *holdTable) held(key string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.m[key] {
		if h.limit <= 1 && h.alive(now) && !h.releasing {
			return true
		}
	}
	return false
}

// permits returns the etcd keys of the driver's permits of the semaphore
// key of size limit whose leases are alive for sure at now, and that are
// not being released.
func (t *holdTable) permits(key string, limit int, now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keys []string
	for _, h := range t.m[key] {
		if h.limit == limit && h.alive(now) && !h.releasing {
			keys = append(keys, h.key)
		}
	}
	return keys
}

// releasing records that a release of the hold of key and token is under
// way: until it is known to have failed, the hold does not count as held.
func (t *holdTable) releasing(key, token string, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.m[key][token]; ok && h.rev == rev {
		h.releasing = true
		t.m[key][token] = h
	}
}

// drop forgets the hold of key and token created at rev.
func (t *holdTable) drop(key, token string, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.m[key][token]; ok && h.rev == rev {
		t.deleteLocked(key, token)
	}
}

// deleted forgets the holds of key stored under the etcd key k and created
// before rev, at which k was deleted.
func (t *holdTable) deleted(key, k string, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tok, h := range t.m[key] {
		if h.key == k && h.rev < rev {
			t.deleteLocked(key, tok)
		}
	}
}

// renewed records a successful renewal sent at sent.
func (t *holdTable) renewed(key, token string, rev int64, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.m[key][token]; ok && h.rev == rev && sent.After(h.renewed) {
		h.renewed = sent
		t.m[key][token] = h
	}
}

func (t *holdTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// idleLease is a lease of the driver's that holds no key: granted for an
// attempt that lost the race, or freed by a release.
type idleLease struct {
	id      clientv3.LeaseID
	secs    int64 // the TTL requested, in whole seconds: the pool's key
	ttl     int64 // the TTL the server granted, in seconds
	renewed time.Time
}

// expires is a lower bound on the lease's expiry on the server.
func (l idleLease) expires() time.Time {
	return l.renewed.Add(time.Duration(l.ttl) * time.Second)
}

// usable reports whether l has at least half its TTL left at now, enough
// for an attempt to attach a key before it can expire.
func (l idleLease) usable(now time.Time) bool {
	return l.expires().Sub(now) >= time.Duration(l.ttl)*time.Second/2
}

// leasePool keeps idle leases for reuse, by requested TTL, newest last. A
// lease is in the pool only while no hold uses it, and is taken out by one
// attempt at a time. Leases that fall out of the pool are left to expire
// on the server.
type leasePool struct {
	mu    sync.Mutex // protects the fields below
	byTTL map[int64][]idleLease
	n     int
}

func (p *leasePool) init() { p.byTTL = map[int64][]idleLease{} }

// get takes the newest usable lease for secs, discarding unusable ones.
func (p *leasePool) get(secs int64, now time.Time) (idleLease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.byTTL[secs]
	for len(s) > 0 {
		l := s[len(s)-1]
		s = s[:len(s)-1]
		p.n--
		if l.usable(now) {
			p.set(secs, s)
			return l, true
		}
	}
	p.set(secs, s)
	return idleLease{}, false
}

// put returns l to the pool if it is still usable and the pool has room.
func (p *leasePool) put(l idleLease, now time.Time) {
	if !l.usable(now) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= maxIdle {
		p.sweep(now)
		if p.n >= maxIdle {
			return
		}
	}
	p.byTTL[l.secs] = append(p.byTTL[l.secs], l)
	p.n++
}

// sweep drops unusable leases. p.mu must be held.
func (p *leasePool) sweep(now time.Time) {
	for secs, s := range p.byTTL {
		kept := s[:0]
		for _, l := range s {
			if l.usable(now) {
				kept = append(kept, l)
			}
		}
		p.n -= len(s) - len(kept)
		p.set(secs, kept)
	}
}

// set stores s as the leases for secs. p.mu must be held.
func (p *leasePool) set(secs int64, s []idleLease) {
	if len(s) == 0 {
		delete(p.byTTL, secs)
		return
	}
	p.byTTL[secs] = s
}

func (p *leasePool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// idle is h's lease once h's key is gone.
func (h hold) idle() idleLease {
	return idleLease{id: h.lease, secs: h.secs, ttl: h.ttl, renewed: h.renewed}
}
