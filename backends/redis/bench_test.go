package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	mix "github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
)

// benchTTL is not a whole number of seconds, so that go-redis's SetNX sends
// PX, as the driver's script does.
const benchTTL = 10*time.Second + 500*time.Millisecond

// rawRelease is the specification's compare-and-delete.
var rawRelease = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
else
	return 0
end`)

// BenchmarkLockCycle measures one acquire and one release of a free lock,
// through the driver and with plain go-redis calls doing the least a correct
// lock must (SET NX PX, then a compare-and-delete script), on the same
// server, so that the ratio is the driver's overhead. Both make two round
// trips per cycle; the driver's release also PUBLISHes a release notice,
// and driver+fence adds the INCR of the fence counter inside the acquire
// script (no extra round trip).
func BenchmarkLockCycle(b *testing.B) {
	srv := redistest.Start(b, nil)
	client := srv.NewClient(b)
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()

	// Warm the server, the connection and the script cache, so that the
	// first sub-benchmark does not pay for them.
	for i := range 500 {
		tok := "warm-" + strconv.Itoa(i)
		if _, err := d.Acquire(ctx, backends.Request{Key: "warm", Token: tok, TTL: benchTTL}); err != nil {
			b.Fatal(err)
		}
		if err := d.Release(ctx, "warm", tok); err != nil {
			b.Fatal(err)
		}
		if err := client.SetNX(ctx, "raw:warm", tok, benchTTL).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rawRelease.Run(ctx, client, []string{"raw:warm"}, tok).Err(); err != nil {
			b.Fatal(err)
		}
	}

	driver := func(fence bool) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			key := b.Name()
			i := 0
			for b.Loop() {
				i++
				tok := "tok-" + strconv.Itoa(i)
				if _, err := d.Acquire(ctx, backends.Request{Key: key, Token: tok, TTL: benchTTL, Fence: fence}); err != nil {
					b.Fatal(err)
				}
				if err := d.Release(ctx, key, tok); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("locker", func(b *testing.B) {
		b.ReportAllocs()
		backend, err := dsync.NewBackend(d, nil)
		if err != nil {
			b.Fatal(err)
		}
		l, err := locker.New(backend, b.Name(), &locker.Options{TTL: benchTTL})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("driver", driver(false))
	b.Run("driver+fence", driver(true))
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		key := "raw:" + b.Name()
		i := 0
		for b.Loop() {
			i++
			tok := "tok-" + strconv.Itoa(i)
			ok, err := client.SetNX(ctx, key, tok, benchTTL).Result()
			if err != nil || !ok {
				b.Fatalf("SET NX = %v, %v", ok, err)
			}
			n, err := rawRelease.Run(ctx, client, []string{key}, tok).Int64()
			if err != nil || n != 1 {
				b.Fatalf("compare-and-delete = %v, %v", n, err)
			}
		}
	})
}

// rawCycle returns the floor's cycle on key: SET NX PX, then the
// compare-and-delete script, each with a fresh token.
func rawCycle(b *testing.B, client *goredis.Client, key string) func() {
	ctx := context.Background()
	i := 0
	return func() {
		i++
		tok := "tok-" + strconv.Itoa(i)
		if ok, err := client.SetNX(ctx, key, tok, benchTTL).Result(); err != nil || !ok {
			b.Fatalf("SET NX = %v, %v", ok, err)
		}
		if n, err := rawRelease.Run(ctx, client, []string{key}, tok).Int64(); err != nil || n != 1 {
			b.Fatalf("compare-and-delete = %v, %v", n, err)
		}
	}
}

// BenchmarkLockCycleRatio interleaves one cycle through the locker with
// fencing (the default), one without, and one raw cycle, so that all three
// see the same machine noise, and reports each one's mean and the ratios to
// the raw floor.
func BenchmarkLockCycleRatio(b *testing.B) {
	srv := redistest.Start(b, nil)
	client := srv.NewClient(b)
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		b.Fatal(err)
	}
	backend, _ := dsync.NewBackend(d, nil)
	b.Cleanup(func() { _ = backend.Close() })
	ctx := context.Background()
	cycle := func(opts *locker.Options) func() {
		l, err := locker.New(backend, "ratio", opts)
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	fenced := cycle(&locker.Options{TTL: benchTTL})
	unfenced := cycle(&locker.Options{TTL: benchTTL, NoFencing: true})
	raw := rawCycle(b, client, "raw:ratio")
	r := mix.Run(b, &mix.Options{Warm: 300},
		mix.Case{Name: "fenced", Run: fenced}, mix.Case{Name: "unfenced", Run: unfenced}, mix.Case{Name: "raw", Run: raw})
	mix.ReportRatio(b, "fenced/raw", r["fenced"], r["raw"])
	mix.ReportRatio(b, "unfenced/raw", r["unfenced"], r["raw"])
}

// BenchmarkSemCycleRatio interleaves, on one server and one driver, one
// fenced acquire and release of a free permit of a semaphore of size 4,
// the same with two other permits held (so that the set persists and every
// call prunes and re-times it), and one fenced lock cycle, so that all
// three see the same machine noise; it reports each one's mean and the
// ratios of the semaphore cycles to the lock cycle.
func BenchmarkSemCycleRatio(b *testing.B) {
	srv := redistest.Start(b, nil)
	client := srv.NewClient(b)
	d, err := redis.NewDriver(client, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	i := 0
	cycle := func(key string, limit int) func() {
		return func() {
			i++
			tok := "tok-" + strconv.Itoa(i)
			if _, err := d.Acquire(ctx, backends.Request{Key: key, Token: tok, TTL: benchTTL, Limit: limit, Fence: true}); err != nil {
				b.Fatal(err)
			}
			if err := d.Release(ctx, key, tok); err != nil {
				b.Fatal(err)
			}
		}
	}
	lock, sem, semHeld := cycle("lock", 1), cycle("sem", 4), cycle("sem-held", 4)
	for _, tok := range []string{"other-1", "other-2"} {
		if _, err := d.Acquire(ctx, backends.Request{Key: "sem-held", Token: tok, TTL: time.Hour, Limit: 4, Fence: true}); err != nil {
			b.Fatal(err)
		}
	}
	r := mix.Run(b, &mix.Options{Warm: 300},
		mix.Case{Name: "lock", Run: lock}, mix.Case{Name: "sem", Run: sem}, mix.Case{Name: "sem-held", Run: semHeld})
	mix.ReportRatio(b, "sem/lock", r["sem"], r["lock"])
	mix.ReportRatio(b, "sem-held/lock", r["sem-held"], r["lock"])
}
