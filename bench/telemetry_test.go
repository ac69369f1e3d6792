package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/redis"
	mix "github.com/dsync-dev/dsync/internal/testenv/interleave"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
)

// BenchmarkTelemetryRatio interleaves, on one server, one uncontended
// lock cycle (the locker's TryAcquire and Release, fenced) on a backend
// with the default telemetry (the OpenTelemetry global providers, no SDK
// installed: nothing recorded, no span started), the same cycle with the
// SDK (a meter provider with a manual reader, and a tracer provider that
// samples every span and hands it to a synchronous exporter that drops
// it: what dsync's instrumentation and the SDK cost), the same with the
// spans handed to a batch processor instead (its goroutine wakes for every
// span: what a usual exporter pipeline adds), and a raw cycle. It reports
// each one's mean and the ratios sdk/default, batch/default and
// default/raw; compare default/raw with backends/redis's
// BenchmarkLockCycleRatio fenced/raw on a commit without telemetry for the
// cost of the hooks when off. It lives in this module, not dsync's, so
// that dsync's requires no SDK.
func BenchmarkTelemetryRatio(b *testing.B) {
	srv := redistest.Start(b, nil)
	client := srv.NewClient(b)
	ctx := context.Background()
	backend := func(t dsync.Telemetry) *dsync.Backend {
		bk, err := redis.New(client, &redis.Options{BackendOptions: dsync.BackendOptions{Telemetry: t}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = bk.Close() })
		return bk
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discardSpans{}))
	tpBatch := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
		_ = tpBatch.Shutdown(context.Background())
	})
	cycle := func(bk *dsync.Backend, key string) func() {
		l, err := locker.New(bk, key, &locker.Options{TTL: telemetryBenchTTL})
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
	plain := cycle(backend(dsync.Telemetry{}), "telemetry-default")
	sdk := cycle(backend(dsync.Telemetry{MeterProvider: mp, TracerProvider: tp}), "telemetry-sdk")
	batch := cycle(backend(dsync.Telemetry{MeterProvider: mp, TracerProvider: tpBatch}), "telemetry-batch")
	raw := rawLockCycle(b, client, "raw:telemetry")
	r := mix.Run(b, &mix.Options{Warm: 300},
		mix.Case{Name: "default", Run: plain}, mix.Case{Name: "sdk", Run: sdk},
		mix.Case{Name: "batch", Run: batch}, mix.Case{Name: "raw", Run: raw})
	mix.ReportRatio(b, "sdk/default", r["sdk"], r["default"])
	mix.ReportRatio(b, "batch/default", r["batch"], r["default"])
	mix.ReportRatio(b, "default/raw", r["default"], r["raw"])
}

// telemetryBenchTTL is not a whole number of seconds, so that go-redis's
// SetNX sends PX, as the driver's script does.
const telemetryBenchTTL = 10*time.Second + 500*time.Millisecond

// rawLockCycle is the least a correct lock cycle does: SET NX PX, then a
// compare-and-delete script (targets.go's rawRelease).
func rawLockCycle(b *testing.B, client *goredis.Client, key string) func() {
	ctx := context.Background()
	i := 0
	return func() {
		i++
		tok := "tok-" + strconv.Itoa(i)
		if ok, err := client.SetNX(ctx, key, tok, telemetryBenchTTL).Result(); err != nil || !ok {
			b.Fatalf("SET NX = %v, %v", ok, err)
		}
		if n, err := rawRelease.Run(ctx, client, []string{key}, tok).Int64(); err != nil || n != 1 {
			b.Fatalf("compare-and-delete = %v, %v", n, err)
		}
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
