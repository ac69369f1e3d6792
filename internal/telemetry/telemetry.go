// Package telemetry is dsync's observability, written once: the
// OpenTelemetry metrics and spans and the log/slog lines of the lease
// layer (T, one per *dsync.Backend, made by dsync.NewBackend and kept on
// it; Prim, one per primitive) and of a Redlock driver's nodes (Nodes).
// docs/observability.md lists what is recorded.
//
// It uses the OpenTelemetry API only: the application installs the SDK,
// globally or per backend. Until it does, nothing is recorded: a span
// start through the global provider returns a span that records nothing,
// and the hooks skip their work on it. With the noop providers
// (go.opentelemetry.io/otel/trace/noop, metric/noop) no span is started
// and the hooks allocate nothing. Nothing is logged without a logger. No hook logs or records a hold token or a
// password; key names become attributes only with KeyAttributes.
//
// Every hook is safe for concurrent use and never blocks but on the
// logger. The package keeps no state of its own: T and Nodes hang off the
// backend and the driver that made them.
package telemetry

import (
	"context"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every meter and tracer: the
// module path.
const ScopeName = "github.com/dsync-dev/dsync"

// Settings choose where a backend's telemetry goes. It has the shape of
// dsync.Telemetry, which documents each field.
type Settings struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	KeyAttributes  bool
}

// Attribute keys.
const (
	keyBackend   = attribute.Key("dsync.backend")
	keyPrimitive = attribute.Key("dsync.primitive")
	keyKey       = attribute.Key("dsync.key")
	keyOperation = attribute.Key("dsync.operation")
	keyOutcome   = attribute.Key("dsync.outcome")
	keyCause     = attribute.Key("dsync.lease.cause")
	keyChange    = attribute.Key("dsync.election.change")
	keyAttempts  = attribute.Key("dsync.attempts")
	keyWait      = attribute.Key("dsync.wait")
	keyToken     = attribute.Key("dsync.token")
	keyNode      = attribute.Key("dsync.redlock.node")
	keyAddress   = attribute.Key("server.address")
	keyPort      = attribute.Key("server.port")
)

// Buckets of the histograms: lock cycles take tens of microseconds on
// loopback, and a waiter may wait for an hour.
var (
	secondsBuckets  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	attemptsBuckets = []float64{1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000}
)

// T is the telemetry of one backend.
type T struct {
	backend string // the driver's Capabilities().Name
	keys    bool
	log     *slog.Logger // nil: nothing logged
	tracer  trace.Tracer
	noop    bool // the tracer provider is the noop package's: no spans

	acquireDuration metric.Float64Histogram
	acquireWait     metric.Float64Histogram
	acquireAttempts metric.Int64Histogram
	holdDuration    metric.Float64Histogram
	extensions      metric.Int64Counter
	lost            metric.Int64Counter
	termChanges     metric.Int64Counter
	failover        metric.Float64Histogram

	// The attributes of each primitive, made once: by kind, and by kind
	// and key with KeyAttributes. Each keeps its leases active and terms
	// led in atomics, which the gauges' callback (reg) reads.
	mu    sync.Mutex // protects byKey
	prims [numKinds]*attrs
	byKey map[kindKey]*attrs
	reg   metric.Registration // nil if the provider refused it
}

type kindKey struct {
	kind Kind
	key  string
}

// New returns the telemetry of a backend whose driver is named backend
// ("redis"). An instrument the meter provider refuses is replaced by a
// noop one; the error says which.
func New(backend string, s Settings) (*T, error) {
	t := &T{backend: backend, keys: s.KeyAttributes, log: s.Logger}
	tp := s.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t.tracer = tp.Tracer(ScopeName)
	_, t.noop = tp.(tracenoop.TracerProvider)
	mp := s.MeterProvider
	if mp == nil {
		mp = otelMeterProvider()
	}
	m := instruments{meter: mp.Meter(ScopeName)}
	t.acquireDuration = m.seconds("dsync.acquire.duration", "Time an acquisition call (Acquire, TryAcquire, Campaign) took, by outcome: acquired, contended, unavailable, timed_out, error.")
	t.acquireWait = m.seconds("dsync.acquire.wait", "Time a blocking acquisition (Acquire, Campaign) waited before its last attempt: in the process's waiting line, in earlier attempts and between them.")
	t.acquireAttempts = m.count("dsync.acquire.attempts", "{attempt}", "Attempts a blocking acquisition (Acquire, Campaign) made on the backend.")
	t.holdDuration = m.seconds("dsync.lease.hold.duration", "Time a lease was held, from its acquisition to its release or loss.")
	t.extensions = m.counter("dsync.lease.extensions", "{extension}", "Extensions of a lease (auto-extension included), by outcome: extended, limit, not_held, error.")
	t.lost = m.counter("dsync.lease.lost", "{lease}", "Leases lost, by cause: gone (an extension found the hold gone), expired (the validity ran out), extension_bound (it ran out after auto-extension stopped at its bound).")
	t.termChanges = m.counter("dsync.election.term.changes", "{change}", "Changes of term seen by this process, by change: won, resigned, lost (its own terms), observed (a new leader seen by Observe).")
	t.failover = m.seconds("dsync.election.failover.duration", "Time from the previous leader's last renewal, as a candidate saw it, to the candidate's own term.")
	for k := range numKinds {
		t.prims[k] = t.newAttrs(Kind(k), "")
	}
	t.byKey = map[kindKey]*attrs{}
	// Leases held and terms led change twice a cycle: they are counted in
	// atomics and reported at collection, not measured on the hot path.
	active, err := m.meter.Int64ObservableUpDownCounter("dsync.lease.active", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases (locks, semaphore permits, leader terms) this process holds now."))
	m.keep(err)
	leader, err := m.meter.Int64ObservableUpDownCounter("dsync.election.leader", metric.WithUnit("{election}"),
		metric.WithDescription("1 while this process leads the election (with several elections and no key attribute: how many it leads)."))
	m.keep(err)
	if active != nil && leader != nil {
		t.reg, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			t.each(func(a *attrs) {
				o.ObserveInt64(active, a.active.Load(), a.observe...)
				if a.kind == Election {
					o.ObserveInt64(leader, a.leading.Load(), a.observe...)
				}
			})
			return nil
		}, active, leader)
		m.keep(err)
	}
	return t, m.err
}

// each calls f with the attributes of every primitive.
func (t *T) each(f func(*attrs)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.keys {
		for _, a := range t.prims {
			f(a)
		}
	}
	for _, a := range t.byKey {
		f(a)
	}
}

// Close stops the gauges' callback: the backend is closed.
func (t *T) Close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// otelMeterProvider is the global meter provider: the default until the
// application installs one, whose instruments then forward to it.
func otelMeterProvider() metric.MeterProvider { return otel.GetMeterProvider() }

// instruments makes the instruments of one meter, remembering the first
// error.
type instruments struct {
	meter metric.Meter
	err   error
}

func (m *instruments) keep(err error) {
	if m.err == nil && err != nil {
		m.err = err
	}
}

// The makers below return a noop instrument where the provider returned
// none with its error.
var nop = metricnoop.Meter{}

func (m *instruments) seconds(name, desc string) metric.Float64Histogram {
	h, err := m.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	m.keep(err)
	if h == nil {
		h, _ = nop.Float64Histogram(name)
	}
	return h
}

func (m *instruments) count(name, unit, desc string) metric.Int64Histogram {
	h, err := m.meter.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(attemptsBuckets...))
	m.keep(err)
	if h == nil {
		h, _ = nop.Int64Histogram(name)
	}
	return h
}

func (m *instruments) counter(name, unit, desc string) metric.Int64Counter {
	c, err := m.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	m.keep(err)
	if c == nil {
		c, _ = nop.Int64Counter(name)
	}
	return c
}

// Nop is telemetry that records nothing, for configurations built without
// a backend's (tests of the lease layer alone).
func Nop() *T {
	t, _ := New("", Settings{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()})
	return t
}

// startSpan starts a span named name under ctx, and returns the span
// only if it records: nil tells the hooks that there is nothing to write
// on it (no SDK installed, or the span was not sampled). With a noop
// provider it starts none and returns ctx.
func (t *T) startSpan(ctx context.Context, name string, opts []trace.SpanStartOption) (context.Context, trace.Span) {
	if t.noop {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if !span.IsRecording() {
		return ctx, nil
	}
	return ctx, span
}
