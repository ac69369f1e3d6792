package telemetry

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestOffCostsNoAllocation: with the global providers and no SDK, or with
// noop providers, and no logger, a lock cycle's hooks and a Redlock node
// request's allocate nothing, and no span is started.
func TestOffCostsNoAllocation(t *testing.T) {
	for name, s := range map[string]Settings{
		"global default": {},
		"noop":           {MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := New("redis", s)
			if err != nil {
				t.Fatal(err)
			}
			p := tel.Prim(Lock, "k", "")
			nodes := NewNodes(s, []string{"127.0.0.1:6379"})
			defer nodes.Close()
			ctx := context.Background()
			allocs := testing.AllocsPerRun(200, func() {
				actx, c := p.Start(ctx, TryAcquire)
				if actx != ctx {
					t.Fatal("a span was started")
				}
				c.Attempting()
				nctx, n := nodes.Start(actx, ctx, 0, NodeAcquire)
				n.End(nctx, nil)
				c.Attempted(nil)
				c.Acquired(actx, 7, nil)
				ectx, e := p.Start(ctx, Extend)
				e.Extended(ectx, Extended, nil)
				_, r := p.Start(ctx, Release)
				p.Ended(time.Now(), Released, nil)
				r.Released(nil)
			})
			if allocs != 0 {
				t.Errorf("%v allocations per lock cycle with telemetry off, want 0", allocs)
			}
		})
	}
}
