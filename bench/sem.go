package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/semaphore"
)

// Semaphore scenarios: a free permit of a semaphore of semFreeSize taken
// and given back by one goroutine; semPoolWorkers goroutines sharing the
// semPoolSize permits of one semaphore, each holding a permit for
// semPoolWork, asleep (long enough for the permits to be scarce; with more
// busy holders than CPUs the run would measure Go's scheduler).
const (
	semFreeSize    = 4
	semPoolSize    = 3
	semPoolWorkers = 8
	semPoolWork    = time.Millisecond
)

// semWorker acquires and releases permits of dsync semaphores of one size.
type semWorker struct {
	b    *dsync.Backend
	size int
	name string
	s    *semaphore.Semaphore
}

func (w *semWorker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	if w.s == nil || w.name != name {
		s, err := semaphore.New(w.b, name, w.size, &semaphore.Options{TTL: lockTTL}) // no I/O
		if err != nil {
			return nil, err
		}
		w.s, w.name = s, name
	}
	p, err := w.s.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return p.Release, nil
}

func (w *semWorker) close() {}

// semTargets are dsync's semaphores on each backend, of size size.
func semTargets(b *backends, size int) []*target {
	var ts []*target
	for _, x := range []struct {
		group string
		b     *dsync.Backend
	}{{groupRedis, b.redis}, {groupRedlock, b.redlock}, {groupEtcd, b.etcd}} {
		ts = append(ts, &target{
			name: "dsync semaphore", variant: fmt.Sprintf("size %d", size), group: x.group, role: roleDsync,
			newWorker: func(context.Context) (worker, error) { return &semWorker{b: x.b, size: size}, nil },
		})
	}
	return ts
}

// FailoverSample is one leader failover: the leader's backend closed
// without resigning (a crash), until another candidate leads.
type FailoverSample struct {
	Group string  `json:"group"`
	TTLMs float64 `json:"ttl_ms"`
	// FailoverMs is from the crash to the next candidate's Campaign
	// returning.
	FailoverMs float64 `json:"failover_ms"`
	// AfterExpiryMs is from the crashed leader's lease's local expiry
	// (Leadership.Expires, read at the crash: its last renewal plus the TTL
	// minus the drift allowance) to the next candidate leading: the time
	// the others took to notice, plus the drift allowance.
	AfterExpiryMs float64 `json:"after_expiry_ms"`
}

// failoverTTL is the elections' TTL: etcd's minimum with the embedded
// member's timing.
const failoverTTL = time.Second

// failover elects one of two candidates, each on a backend of its own
// opened from url, lets it lead for a random part of the TTL (so that the
// crash falls anywhere between two renewals), closes its backend and
// measures the time until the other candidate leads.
func failover(ctx context.Context, group, url string) (FailoverSample, error) {
	s := FailoverSample{Group: group, TTLMs: float64(failoverTTL.Milliseconds())}
	name := nextKey("leader")
	var bs [2]*dsync.Backend
	defer func() {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
	}()
	var es [2]*leader.Election
	for i := range bs {
		b, err := dsync.Open(ctx, url)
		if err != nil {
			return s, err
		}
		bs[i] = b
		if err := waitQuarantine(ctx, b); err != nil {
			return s, err
		}
		if es[i], err = leader.New(b, name, fmt.Sprintf("candidate-%d", i), &leader.Options{TTL: failoverTTL}); err != nil {
			return s, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*failoverTTL)
	defer cancel()
	first, err := es[0].Campaign(cctx)
	if err != nil {
		return s, err
	}
	type result struct {
		l   dsync.Leadership
		at  time.Time
		err error
	}
	next := make(chan result, 1)
	go func() {
		l, err := es[1].Campaign(cctx)
		next <- result{l, time.Now(), err}
	}()
	select {
	case <-time.After(rand.N(failoverTTL)):
	case r := <-next:
		return s, errors.Join(errors.New("the second candidate led while the first did"), r.err)
	}
	expires := first.(*leader.Leadership).Expires()
	crash := time.Now()
	_ = bs[0].Close() // no renewal, no resignation
	r := <-next
	if r.err != nil {
		return s, r.err
	}
	defer func() { _ = r.l.Resign(ctx) }()
	s.FailoverMs = micros(r.at.Sub(crash)) / 1000
	s.AfterExpiryMs = micros(r.at.Sub(expires)) / 1000
	return s, nil
}
