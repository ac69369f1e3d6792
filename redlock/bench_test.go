package redlock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	mix "github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
)

// benchTTL is not a whole number of seconds, so that go-redis's SetNX sends
// PX, as the driver's script does; it fits under benchMaxTTL, which bounds
// the quarantine the fresh servers are waited out of.
const (
	benchTTL    = 2500 * time.Millisecond
	benchMaxTTL = 3 * time.Second
)

// rawRelease is the specification's compare-and-delete.
var rawRelease = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
else
	return 0
end`)

// scriptedRelease does on the server what the driver's release.lua does for
// a lock (it also publishes a release notice), so that the "scripted" floor
// differs from the driver only on the client side: an unfenced acquire is
// a plain SET NX PX in both.
var (
	scriptedRelease = goredis.NewScript(`local v = redis.call("GET", KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n") then
	redis.call("DEL", KEYS[1])
	redis.call("PUBLISH", KEYS[1] .. ":released", "released")
	return 1
end
return 0`)
)

// BenchmarkLockCycleRatio measures one uncontended acquire and release of a
// lock on 5 loopback masters three ways, interleaved in every iteration so
// that all three see the same machine noise:
//
//   - raw: the floor, the least a correct Redlock client must do with
//     go-redis: SET NX PX on the 5 masters in parallel (one goroutine each,
//     waiting for all 5 replies), then the compare-and-delete script on the
//     5 in parallel, waiting for all 5. Two parallel round trips.
//   - scripted: the raw cycle with the driver's server-side work (its
//     release script, with the release notice), to tell the client's
//     overhead from the server's.
//   - dsync: the same cycle through locker.TryAcquire and Lease.Release
//     with NoFencing (the driver's one-round mode), decided at quorum.
//   - fenced: the locker's default, with fencing tokens: the acquire
//     script draws a counter on each node, and a second round writes the
//     token back only when fewer than a quorum drew it (not here: the
//     key's counters stay equal).
//
// It reports each one's mean, dsync/raw (the target: 1.1),
// dsync/scripted (the client's share of the gap), and fencing's
// extra cost (fenced minus dsync, and fenced/dsync).
func BenchmarkLockCycleRatio(b *testing.B) {
	servers := redistest.StartN(b, 5, nil)
	waitOutQuarantine(b, servers, benchMaxTTL)
	backend := open(b, redlockURL(servers, "max_ttl="+benchMaxTTL.String()))
	b.Cleanup(func() { _ = backend.Close() })
	clients := make([]*goredis.Client, len(servers))
	for i, s := range servers {
		clients[i] = s.NewClient(b)
	}
	ctx := context.Background()

	lockers := map[bool]*locker.Locker{}
	for _, fence := range []bool{false, true} {
		l, err := locker.New(backend, "bench-fence-"+strconv.FormatBool(fence), &locker.Options{TTL: benchTTL, NoFencing: !fence})
		if err != nil {
			b.Fatal(err)
		}
		lockers[fence] = l
	}
	dsyncCycle := func(fence bool) {
		lease, err := lockers[fence].TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}

	i := 0
	errs := make([]error, len(clients))
	rawCycle := func(scripted bool) {
		i++
		tok := "tok-" + strconv.Itoa(i)
		rawKey, release := "raw:ratio", rawRelease
		if scripted {
			rawKey, release = "scripted:ratio", scriptedRelease
		}
		var wg sync.WaitGroup
		for n, c := range clients {
			wg.Go(func() {
				ok, err := c.SetNX(ctx, rawKey, tok, benchTTL).Result()
				if err == nil && !ok {
					err = goredis.Nil
				}
				errs[n] = err
			})
		}
		wg.Wait()
		granted := 0
		for _, err := range errs {
			if err == nil {
				granted++
			}
		}
		if granted < len(clients)/2+1 {
			b.Fatalf("raw SET NX granted by %d of %d: %v", granted, len(clients), errs)
		}
		for n, c := range clients {
			wg.Go(func() { errs[n] = release.Run(ctx, c, []string{rawKey}, tok).Err() })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatalf("raw compare-and-delete: %v", err)
			}
		}
	}

	r := mix.Run(b, &mix.Options{Warm: 300},
		mix.Case{Name: "raw", Run: func() { rawCycle(false) }},
		mix.Case{Name: "scripted", Run: func() { rawCycle(true) }},
		mix.Case{Name: "dsync", Run: func() { dsyncCycle(false) }},
		mix.Case{Name: "fenced", Run: func() { dsyncCycle(true) }})
	mix.ReportRatio(b, "dsync/raw", r["dsync"], r["raw"])
	mix.ReportRatio(b, "dsync/scripted", r["dsync"], r["scripted"])
	mix.ReportRatio(b, "fenced/dsync", r["fenced"], r["dsync"])
	b.ReportMetric(float64((r["fenced"].Mean() - r["dsync"].Mean()).Nanoseconds()), "fence-extra-ns/cycle")
}

// BenchmarkWorkers shows what the driver's workers (pool.go) save: the
// uncontended lock cycle of BenchmarkLockCycleRatio (NoFencing), on the
// same 5 loopback masters, through two drivers built alike and
// interleaved: one made by New, whose node requests run on its workers,
// and one made by NewWithoutWorkers, whose every request runs on a fresh
// goroutine. It reports fresh/workers; the workers stay while it is at
// least 1.1 on 2 cores or pinned to one.
func BenchmarkWorkers(b *testing.B) {
	servers := redistest.StartN(b, 5, nil)
	waitOutQuarantine(b, servers, benchMaxTTL)
	ctx := context.Background()
	cycle := map[bool]func(){}
	for _, workers := range []bool{true, false} {
		nodes := make([]*goredis.Options, len(servers))
		for i, s := range servers {
			nodes[i] = &goredis.Options{Addr: s.Addr()}
		}
		newDriver := redlock.NewDriver
		if !workers {
			newDriver = redlock.NewWithoutWorkers
		}
		d, err := newDriver(ctx, nodes, &redlock.Options{MaxTTL: benchMaxTTL})
		if err != nil {
			b.Fatal(err)
		}
		backend, err := dsync.NewBackend(d, nil)
		if err != nil {
			_ = d.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = backend.Close() })
		l, err := locker.New(backend, "bench-workers-"+strconv.FormatBool(workers), &locker.Options{TTL: benchTTL, NoFencing: true})
		if err != nil {
			b.Fatal(err)
		}
		cycle[workers] = func() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	r := mix.Run(b, &mix.Options{Warm: 300},
		mix.Case{Name: "workers", Run: cycle[true]},
		mix.Case{Name: "fresh", Run: cycle[false]})
	mix.ReportRatio(b, "fresh/workers", r["fresh"], r["workers"])
}
