// Package oteltest records what dsync's telemetry reports, for tests: a
// meter provider and a tracer provider of the OpenTelemetry API that keep
// what they are given in memory (no SDK), and a logger into a buffer,
// wired as one dsync.Telemetry. For tests only.
//
// It implements what internal/telemetry uses, as the SDK would report it
// with a manual reader and cumulative temporality: Int64Counter,
// Int64Histogram and Float64Histogram aggregate per attribute set since
// the start (a histogram's sum, count and max: no buckets, no exemplars);
// Int64ObservableUpDownCounter, Int64ObservableGauge and
// Float64ObservableGauge report what the callbacks given to
// RegisterCallback observe at each Collect, and only that; a span keeps
// its name, kind, parent, attributes (the last value of a key), events,
// links and status. Any other instrument is the noop package's and records
// nothing.
package oteltest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/dsync-dev/dsync"
)

// scope is the instrumentation scope dsync's meters must use: the module
// path.
const scope = "github.com/dsync-dev/dsync"

// Recorder holds what one backend's telemetry reported.
type Recorder struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	logs           lockedBuffer

	mu          sync.Mutex // protects the fields below
	instruments []*instrument
	byName      map[[2]string]*instrument // by scope and name
	callbacks   []*registration
	ended       []Span
	lastID      uint64 // the last trace or span ID handed out
	stopped     bool   // the test has ended: nothing more is recorded
}

// New returns a recorder that stops recording when the test ends, as the
// SDK's providers do once shut down. Log lines of every level are kept,
// as JSON.
func New(t testing.TB) *Recorder {
	r := &Recorder{byName: map[[2]string]*instrument{}}
	r.MeterProvider = meterProvider{r: r}
	r.TracerProvider = tracerProvider{r: r}
	t.Cleanup(func() {
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
	})
	return r
}

// Telemetry is the settings that send a backend's telemetry to r.
func (r *Recorder) Telemetry(keys bool) dsync.Telemetry {
	return dsync.Telemetry{
		MeterProvider:  r.MeterProvider,
		TracerProvider: r.TracerProvider,
		Logger:         slog.New(slog.NewJSONHandler(&r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KeyAttributes:  keys,
	}
}

// Logs returns the log lines so far.
func (r *Recorder) Logs() string { return r.logs.String() }

// Metric is what one instrument reported at a Collect.
type Metric struct {
	Scope       string // the meter's instrumentation scope
	Name        string
	Instrument  string // its kind in the API: "Int64Counter", "Float64ObservableGauge", ...
	Unit        string
	Description string
	Bounds      []float64 // a histogram's bucket boundaries, as asked for (the recorder keeps no buckets)
	Points      []Point   // one per attribute set
}

// Point is one data point of a metric, whatever its kind: Value is a
// counter's or gauge's value, or a histogram's sum; Count is a histogram's
// count (1 for the others); Max is a histogram's largest value.
type Point struct {
	Attrs attribute.Set
	Value float64
	Count uint64
	Max   float64
}

// Get returns the value of attribute key, or "" if absent.
func (p Point) Get(key string) string {
	v, ok := p.Attrs.Value(attribute.Key(key))
	if !ok {
		return ""
	}
	return v.String()
}

// Collect reads every metric now: it runs the registered callbacks, then
// returns each instrument that has points, in the order they were made.
// A meter with another scope than the module path, a callback's error and
// an observation of an instrument the callback was not registered for fail
// the test.
func (r *Recorder) Collect(t testing.TB) []Metric {
	t.Helper()
	r.mu.Lock()
	callbacks := slices.Clone(r.callbacks)
	r.mu.Unlock()
	observed := map[*instrument]*points{}
	for _, reg := range callbacks {
		o := &observer{reg: reg, observed: observed}
		if err := reg.f(context.Background(), o); err != nil {
			t.Errorf("a callback failed: %v", err)
		}
		for _, err := range o.errs {
			t.Error(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Metric
	for _, in := range r.instruments {
		ps := &in.points
		if in.observable() {
			if ps = observed[in]; ps == nil {
				continue
			}
		}
		if len(ps.order) == 0 {
			continue
		}
		if in.scope != scope {
			t.Errorf("instrument %s has scope %q, want the module path", in.name, in.scope)
		}
		m := Metric{Scope: in.scope, Name: in.name, Instrument: in.kind, Unit: in.unit, Description: in.desc, Bounds: in.bounds}
		for _, k := range ps.order {
			m.Points = append(m.Points, *ps.byAttrs[k])
		}
		out = append(out, m)
	}
	return out
}

// Points returns the data points of the metric named name whose attributes
// include every key=value of match ("dsync.outcome", "acquired", ...).
func Points(ms []Metric, name string, match ...string) []Point {
	var out []Point
	for _, m := range ms {
		if m.Name != name {
			continue
		}
	points:
		for _, p := range m.Points {
			for i := 0; i+1 < len(match); i += 2 {
				if v, ok := p.Attrs.Value(attribute.Key(match[i])); !ok || v.String() != match[i+1] {
					continue points
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// Sum adds up the values (histograms: the sums) and counts of the matching
// points of name.
func Sum(ms []Metric, name string, match ...string) (value float64, count uint64) {
	for _, p := range Points(ms, name, match...) {
		value += p.Value
		count += p.Count
	}
	return value, count
}

// Span is an ended span, as recorded.
type Span struct {
	Name        string
	Scope       string // the tracer's instrumentation scope
	Kind        trace.SpanKind
	SpanContext trace.SpanContext
	Parent      trace.SpanContext // not valid for a root span
	Attributes  []attribute.KeyValue
	Events      []Event
	Links       []trace.Link
	Status      Status
	Start, End  time.Time
}

// Event is an event of a span; RecordError's is named "exception".
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
	Time       time.Time
}

// Status is a span's status: Description only with codes.Error.
type Status struct {
	Code        codes.Code
	Description string
}

// Ended returns the ended spans named name, in the order they ended.
func (r *Recorder) Ended(name string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.ended {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the value of a span's attribute key, or "" if absent.
func Attr(s Span, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// Text is everything the ended spans say (names, attributes, events,
// status), for searching for what must not be there.
func (r *Recorder) Text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, s := range r.ended {
		b.WriteString(s.Name + " " + s.Status.Description + "\n")
		for _, kv := range s.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
		for _, e := range s.Events {
			b.WriteString(e.Name + "\n")
			for _, kv := range e.Attributes {
				b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
			}
		}
	}
	return b.String()
}

// Metrics.

// instrument is one instrument's identity and, for the synchronous ones,
// its points since the start.
type instrument struct {
	r                 *Recorder
	scope, name, kind string
	unit, desc        string
	bounds            []float64
	points            points // synchronous instruments'; r.mu protects it
}

func (in *instrument) observable() bool { return strings.Contains(in.kind, "Observable") }

func (in *instrument) aggregation() aggregation {
	switch {
	case strings.HasSuffix(in.kind, "Histogram"):
		return histogram
	case strings.HasSuffix(in.kind, "Gauge"):
		return last
	}
	return sum
}

// record adds a measurement of a synchronous instrument.
func (in *instrument) record(v float64, attrs attribute.Set) {
	if in.kind == "Int64Counter" && v < 0 {
		return // a counter only grows: the SDK drops it too
	}
	in.r.mu.Lock()
	defer in.r.mu.Unlock()
	if !in.r.stopped {
		in.points.add(attrs, v, in.aggregation())
	}
}

// points are an instrument's points by attribute set, in the order the
// sets first came.
type points struct {
	byAttrs map[attribute.Distinct]*Point
	order   []attribute.Distinct
}

// add adds a measurement v to the point of attrs, as the instrument's
// aggregation does: a sum (counters), a histogram (sum, count, max) or the
// last value (gauges).
func (ps *points) add(attrs attribute.Set, v float64, agg aggregation) {
	k := attrs.Equivalent()
	p := ps.byAttrs[k]
	if p == nil {
		if ps.byAttrs == nil {
			ps.byAttrs = map[attribute.Distinct]*Point{}
		}
		p = &Point{Attrs: attrs, Count: 1}
		if agg == histogram {
			p.Count, p.Max = 0, v
		}
		ps.byAttrs[k] = p
		ps.order = append(ps.order, k)
	}
	switch agg {
	case sum:
		p.Value += v
	case histogram:
		p.Value += v
		p.Count++
		p.Max = max(p.Max, v)
	case last:
		p.Value = v
	}
}

type aggregation uint8

const (
	sum aggregation = iota
	histogram
	last
)

// instrument returns the instrument of scope and name, made the first
// time, as the SDK returns the same one for the same identity.
func (r *Recorder) instrument(scope, name, kind, unit, desc string, bounds []float64) *instrument {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := [2]string{scope, name}
	if in := r.byName[id]; in != nil {
		return in
	}
	in := &instrument{r: r, scope: scope, name: name, kind: kind, unit: unit, desc: desc, bounds: slices.Clone(bounds)}
	r.byName[id] = in
	r.instruments = append(r.instruments, in)
	return in
}

type meterProvider struct {
	metricnoop.MeterProvider
	r *Recorder
}

func (p meterProvider) Meter(name string, _ ...metric.MeterOption) metric.Meter {
	return meter{r: p.r, scope: name}
}

type meter struct {
	metricnoop.Meter
	r     *Recorder
	scope string
}

func (m meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(opts...)
	return int64Counter{in: m.r.instrument(m.scope, name, "Int64Counter", c.Unit(), c.Description(), nil)}, nil
}

func (m meter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(opts...)
	return int64Histogram{in: m.r.instrument(m.scope, name, "Int64Histogram", c.Unit(), c.Description(), c.ExplicitBucketBoundaries())}, nil
}

func (m meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	return float64Histogram{in: m.r.instrument(m.scope, name, "Float64Histogram", c.Unit(), c.Description(), c.ExplicitBucketBoundaries())}, nil
}

func (m meter) Int64ObservableUpDownCounter(name string, opts ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	c := metric.NewInt64ObservableUpDownCounterConfig(opts...)
	return int64ObservableUpDownCounter{in: m.r.instrument(m.scope, name, "Int64ObservableUpDownCounter", c.Unit(), c.Description(), nil)}, nil
}

func (m meter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	c := metric.NewInt64ObservableGaugeConfig(opts...)
	return int64ObservableGauge{in: m.r.instrument(m.scope, name, "Int64ObservableGauge", c.Unit(), c.Description(), nil)}, nil
}

func (m meter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	c := metric.NewFloat64ObservableGaugeConfig(opts...)
	return float64ObservableGauge{in: m.r.instrument(m.scope, name, "Float64ObservableGauge", c.Unit(), c.Description(), nil)}, nil
}

// RegisterCallback registers f, called at each Collect for instruments.
func (m meter) RegisterCallback(f metric.Callback, instruments ...metric.Observable) (metric.Registration, error) {
	reg := &registration{r: m.r, f: f, instruments: map[*instrument]bool{}}
	for _, o := range instruments {
		if o, ok := o.(recorded); ok {
			reg.instruments[o.instrument()] = true
		}
	}
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.r.callbacks = append(m.r.callbacks, reg)
	return reg, nil
}

// recorded is every instrument of this package.
type recorded interface{ instrument() *instrument }

type int64Counter struct {
	metricnoop.Int64Counter
	in *instrument
}

func (c int64Counter) instrument() *instrument      { return c.in }
func (c int64Counter) Enabled(context.Context) bool { return true }
func (c int64Counter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	c.in.record(float64(v), metric.NewAddConfig(opts).Attributes())
}

type int64Histogram struct {
	metricnoop.Int64Histogram
	in *instrument
}

func (h int64Histogram) instrument() *instrument      { return h.in }
func (h int64Histogram) Enabled(context.Context) bool { return true }
func (h int64Histogram) Record(_ context.Context, v int64, opts ...metric.RecordOption) {
	h.in.record(float64(v), metric.NewRecordConfig(opts).Attributes())
}

type float64Histogram struct {
	metricnoop.Float64Histogram
	in *instrument
}

func (h float64Histogram) instrument() *instrument      { return h.in }
func (h float64Histogram) Enabled(context.Context) bool { return true }
func (h float64Histogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	h.in.record(v, metric.NewRecordConfig(opts).Attributes())
}

type int64ObservableUpDownCounter struct {
	metricnoop.Int64ObservableUpDownCounter
	in *instrument
}

func (o int64ObservableUpDownCounter) instrument() *instrument { return o.in }

type int64ObservableGauge struct {
	metricnoop.Int64ObservableGauge
	in *instrument
}

func (o int64ObservableGauge) instrument() *instrument { return o.in }

type float64ObservableGauge struct {
	metricnoop.Float64ObservableGauge
	in *instrument
}

func (o float64ObservableGauge) instrument() *instrument { return o.in }

type registration struct {
	metricnoop.Registration
	r           *Recorder
	f           metric.Callback
	instruments map[*instrument]bool
}

func (reg *registration) Unregister() error {
	reg.r.mu.Lock()
	defer reg.r.mu.Unlock()
	reg.r.callbacks = slices.DeleteFunc(reg.r.callbacks, func(c *registration) bool { return c == reg })
	return nil
}

// observer takes one callback's observations during a Collect. Callbacks
// run one at a time.
type observer struct {
	metricnoop.Observer
	reg      *registration
	observed map[*instrument]*points
	errs     []error
}

func (o *observer) ObserveInt64(obs metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.observe(obs, float64(v), opts)
}

func (o *observer) ObserveFloat64(obs metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.observe(obs, v, opts)
}

func (o *observer) observe(obs metric.Observable, v float64, opts []metric.ObserveOption) {
	r, ok := obs.(recorded)
	if !ok {
		o.errs = append(o.errs, fmt.Errorf("a callback observed a %T, not an instrument of the recorder", obs))
		return
	}
	in := r.instrument()
	if !o.reg.instruments[in] {
		o.errs = append(o.errs, fmt.Errorf("a callback observed %s, an instrument it was not registered for", in.name))
		return
	}
	ps := o.observed[in]
	if ps == nil {
		ps = &points{}
		o.observed[in] = ps
	}
	ps.add(metric.NewObserveConfig(opts).Attributes(), v, in.aggregation())
}

// Traces.

type tracerProvider struct {
	tracenoop.TracerProvider
	r *Recorder
}

func (p tracerProvider) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return tracer{p: p, scope: name}
}

type tracer struct {
	tracenoop.Tracer
	p     tracerProvider
	scope string
}

// Start starts a span, a child of the span in ctx unless trace.WithNewRoot
// says otherwise. Once the test has ended, it starts none.
func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	r := t.p.r
	c := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if c.NewRoot() {
		parent = trace.SpanContext{}
	}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return tracenoop.Tracer{}.Start(ctx, name, opts...)
	}
	traceID := parent.TraceID()
	if !parent.IsValid() {
		r.lastID++
		binary.BigEndian.PutUint64(traceID[8:], r.lastID)
	}
	r.lastID++
	var spanID trace.SpanID
	binary.BigEndian.PutUint64(spanID[:], r.lastID)
	r.mu.Unlock()

	s := &span{tp: t.p, rec: Span{
		Name:  name,
		Scope: t.scope,
		Kind:  trace.ValidateSpanKind(c.SpanKind()),
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
		}),
		Parent: parent,
		Links:  c.Links(),
		Start:  c.Timestamp(),
	}}
	if s.rec.Start.IsZero() {
		s.rec.Start = time.Now()
	}
	s.SetAttributes(c.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

type span struct {
	tracenoop.Span
	tp    tracerProvider
	mu    sync.Mutex // protects the fields below
	rec   Span       // SpanContext never changes
	ended bool
}

func (s *span) SpanContext() trace.SpanContext       { return s.rec.SpanContext }
func (s *span) TracerProvider() trace.TracerProvider { return s.tp }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SetAttributes sets each attribute, replacing the value of a key set
// before.
func (s *span) SetAttributes(kvs ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for _, kv := range kvs {
		if !kv.Valid() {
			continue
		}
		if i := slices.IndexFunc(s.rec.Attributes, func(a attribute.KeyValue) bool { return a.Key == kv.Key }); i >= 0 {
			s.rec.Attributes[i] = kv
		} else {
			s.rec.Attributes = append(s.rec.Attributes, kv)
		}
	}
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Events = append(s.rec.Events, Event{Name: name, Attributes: c.Attributes(), Time: c.Timestamp()})
	}
}

// RecordError adds an "exception" event with the error's type and
// message, as the SDK does.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	s.AddEvent("exception", append(opts, trace.WithAttributes(
		attribute.String("exception.type", fmt.Sprintf("%T", err)),
		attribute.String("exception.message", err.Error())))...)
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && l.SpanContext.IsValid() {
		s.rec.Links = append(s.rec.Links, l)
	}
}

// SetStatus sets the status as the SDK does: Unset changes nothing, Ok is
// final, and only Error keeps a description.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code == codes.Unset || s.rec.Status.Code == codes.Ok {
		return
	}
	st := Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.rec.Status = st
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Name = name
	}
}

// End records the span, the first time.
func (s *span) End(opts ...trace.SpanEndOption) {
	c := trace.NewSpanEndConfig(opts...)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if s.rec.End = c.Timestamp(); s.rec.End.IsZero() {
		s.rec.End = time.Now()
	}
	rec := s.rec
	s.mu.Unlock()
	r := s.tp.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.ended = append(r.ended, rec)
	}
}

type lockedBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
