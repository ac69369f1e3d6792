package redlock_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	mix "github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/redlock"
)

// BenchmarkSemaphoreFillRatio measures one acquire and release of a permit
// of a semaphore of size 8 on 5 loopback masters as the semaphore fills:
// 0, 1, 4 (half) and 7 (size-1) of its slots held by other clients, and
// the refusal of an attempt on a full one (8 held). Beside them, in the
// same iterations, one lock cycle on the same driver. Every case runs once
// per iteration, interleaved, so that all see the same machine noise; all
// go through the driver SPI with fencing tokens (two rounds per won slot).
//
// It reports each case's mean and its ratio to the free case and to the
// lock cycle. Slots are tried in order from a random start, so with k of 8
// taken at random places an attempt makes 9/(9-k) rounds on average (1,
// 1.125, 1.8, 4.5), and a refusal 8.
func BenchmarkSemaphoreFillRatio(b *testing.B) {
	servers := redistest.StartN(b, 5, nil)
	waitOutQuarantine(b, servers, benchMaxTTL)
	backend := open(b, redlockURL(servers, "max_ttl="+benchMaxTTL.String()))
	b.Cleanup(func() { _ = backend.Close() })
	d := lease.Driver(backend).(*redlock.Driver)
	ctx := context.Background()
	const size = 8
	taken := []int{0, 1, size / 2, size - 1, size}

	type filler struct{ key, token string }
	var fillers []filler
	for _, k := range taken {
		for range k {
			r := backends.Request{Key: fmt.Sprintf("bench-sem-%d", k), Token: rand.Text(), TTL: benchTTL, Limit: size, Fence: true}
			if _, err := d.Acquire(ctx, r); err != nil {
				b.Fatalf("filling %s: %v", r.Key, err)
			}
			fillers = append(fillers, filler{r.Key, r.Token})
		}
	}
	refreshed := time.Now()
	keepFilled := func() { // untimed: the fillers outlive the benchmark
		if time.Since(refreshed) < benchTTL/4 {
			return
		}
		for _, f := range fillers {
			if err := d.Refresh(ctx, f.key, f.token, benchTTL); err != nil {
				b.Fatalf("refreshing a filler: %v", err)
			}
		}
		refreshed = time.Now()
	}

	cycle := func(key string, limit int, wantWon bool) {
		r := backends.Request{Key: key, Token: rand.Text(), TTL: benchTTL, Limit: limit, Fence: true}
		_, err := d.Acquire(ctx, r)
		if !wantWon {
			if err == nil {
				b.Fatalf("%s: won a permit of a full semaphore", key)
			}
			return
		}
		if err != nil {
			b.Fatalf("%s: %v", key, err)
		}
		if err := d.Release(ctx, key, r.Token); err != nil {
			b.Fatalf("%s: release: %v", key, err)
		}
	}

	cases := []mix.Case{{Name: "lock", Run: func() { cycle("bench-sem-lock", 1, true) }}}
	for _, k := range taken {
		name := fmt.Sprintf("taken%d", k)
		if k == size {
			name = "full"
		}
		cases = append(cases, mix.Case{Name: name, Run: func() { cycle(fmt.Sprintf("bench-sem-%d", k), size, k < size) }})
	}
	r := mix.Run(b, &mix.Options{Between: keepFilled}, cases...)
	for _, c := range cases[1:] {
		if c.Name != "taken0" {
			mix.ReportRatio(b, c.Name+"/free", r[c.Name], r["taken0"])
		}
		mix.ReportRatio(b, c.Name+"/lock", r[c.Name], r["lock"])
	}
}
