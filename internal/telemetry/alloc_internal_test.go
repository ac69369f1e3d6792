package telemetry

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// cycleHooks runs the hooks of a lock cycle and of a Redlock node request,
// and reports whether the call's span records.
func cycleHooks(p *Prim, nodes *Nodes) (recording bool) {
	ctx := context.Background()
	actx, c := p.Start(ctx, TryAcquire)
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
	return trace.SpanFromContext(actx).IsRecording()
}

// TestOffRecordsNothing: with the global providers and no SDK, or with
// noop providers, and no logger, a lock cycle's hooks and a Redlock node
// request's record no span; with the noop providers they allocate nothing.
func TestOffRecordsNothing(t *testing.T) {
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
			if cycleHooks(p, nodes) {
				t.Fatal("a span records")
			}
			if s.TracerProvider == nil {
				return
			}
			if allocs := testing.AllocsPerRun(200, func() { cycleHooks(p, nodes) }); allocs != 0 {
				t.Errorf("%v allocations per lock cycle with noop providers, want 0", allocs)
			}
		})
	}
}
