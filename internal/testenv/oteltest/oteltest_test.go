package oteltest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsync-dev/dsync/internal/testenv/oteltest"
)

const scope = "github.com/dsync-dev/dsync"

// errorsTB records the errors a Collect reports instead of failing.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper()                   {}
func (e *errorsTB) Error(args ...any)         { e.errs = append(e.errs, fmt.Sprint(args...)) }
func (e *errorsTB) Errorf(f string, a ...any) { e.errs = append(e.errs, fmt.Sprintf(f, a...)) }

func set(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// TestSynchronousInstruments: counters add up per attribute set (a
// negative increment is dropped), histograms keep sum, count and max, and
// an instrument made twice is one.
func TestSynchronousInstruments(t *testing.T) {
	rec := oteltest.New(t)
	ctx := context.Background()
	m := rec.MeterProvider.Meter(scope)
	c, _ := m.Int64Counter("c", metric.WithUnit("{x}"), metric.WithDescription("a counter"))
	again, _ := rec.MeterProvider.Meter(scope).Int64Counter("c")
	a, b := attribute.String("k", "a"), attribute.String("k", "b")
	c.Add(ctx, 2, set(a))
	again.Add(ctx, 3, metric.WithAttributes(a))
	c.Add(ctx, -1, set(a))
	c.Add(ctx, 1, set(b))
	h, _ := m.Float64Histogram("h", metric.WithExplicitBucketBoundaries(1, 10))
	h.Record(ctx, 0.5, set(a))
	h.Record(ctx, 4, set(a))
	hi, _ := m.Int64Histogram("hi")
	hi.Record(ctx, 7)
	if !c.Enabled(ctx) || !h.Enabled(ctx) {
		t.Error("an instrument says it is not enabled")
	}

	ms := rec.Collect(t)
	if len(ms) != 3 || ms[0].Name != "c" || ms[0].Unit != "{x}" || ms[0].Description != "a counter" || ms[0].Instrument != "Int64Counter" {
		t.Fatalf("metrics %+v, want c (with its unit and description), h, hi", ms)
	}
	if v, n := oteltest.Sum(ms, "c", "k", "a"); v != 5 || n != 1 {
		t.Errorf("c{k=a} = %v (%d points), want 5", v, n)
	}
	if v, _ := oteltest.Sum(ms, "c"); v != 6 {
		t.Errorf("c = %v, want 6", v)
	}
	ps := oteltest.Points(ms, "h", "k", "a")
	if len(ps) != 1 || ps[0].Value != 4.5 || ps[0].Count != 2 || ps[0].Max != 4 || ps[0].Get("k") != "a" || ps[0].Get("none") != "" {
		t.Errorf("h{k=a} = %+v, want sum 4.5, count 2, max 4", ps)
	}
	if !reflect.DeepEqual(ms[1].Bounds, []float64{1, 10}) {
		t.Errorf("h's bounds %v, want [1 10]", ms[1].Bounds)
	}
	if v, n := oteltest.Sum(ms, "hi"); v != 7 || n != 1 {
		t.Errorf("hi = %v, %d, want 7, 1", v, n)
	}
}

// TestObservableInstruments: each Collect reports what the callbacks
// observe then, and only that; Unregister stops a callback; an
// observation of an instrument the callback was not registered for, a
// callback's error and a meter of another scope fail the test.
func TestObservableInstruments(t *testing.T) {
	rec := oteltest.New(t)
	m := rec.MeterProvider.Meter(scope)
	active, _ := m.Int64ObservableUpDownCounter("active")
	gauge, _ := m.Int64ObservableGauge("gauge")
	until, _ := m.Float64ObservableGauge("until")
	var n int64 = 2
	reg, _ := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, n, metric.WithAttributes(attribute.Int("i", 0)))
		o.ObserveInt64(gauge, n)
		if n > 0 {
			o.ObserveFloat64(until, 1.5)
		}
		return nil
	}, active, gauge, until)
	ms := rec.Collect(t)
	if v, _ := oteltest.Sum(ms, "active", "i", "0"); v != 2 {
		t.Errorf("active = %v, want 2", v)
	}
	if ps := oteltest.Points(ms, "until"); len(ps) != 1 || ps[0].Value != 1.5 {
		t.Errorf("until = %+v, want 1.5", ps)
	}
	n = 0
	ms = rec.Collect(t)
	if v, _ := oteltest.Sum(ms, "gauge"); v != 0 || len(oteltest.Points(ms, "gauge")) != 1 {
		t.Errorf("gauge = %v, want one point at 0", v)
	}
	if ps := oteltest.Points(ms, "until"); len(ps) != 0 {
		t.Errorf("until not observed, reported %+v", ps)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if ms := rec.Collect(t); len(ms) != 0 {
		t.Errorf("after Unregister: %+v, want nothing", ms)
	}

	other := rec.MeterProvider.Meter("other")
	stray, _ := other.Int64ObservableGauge("stray")
	c, _ := other.Int64Counter("other.counter")
	c.Add(context.Background(), 1)
	_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(stray, 1)
		return errors.New("boom")
	}, active)
	tb := &errorsTB{TB: t}
	rec.Collect(tb)
	want := []string{"boom", "stray, an instrument it was not registered for", `other.counter has scope "other"`}
	if len(tb.errs) != len(want) {
		t.Fatalf("errors %q, want %d", tb.errs, len(want))
	}
	for i, w := range want {
		if !strings.Contains(tb.errs[i], w) {
			t.Errorf("error %q, want it to say %q", tb.errs[i], w)
		}
	}
}

// TestSpans: a span is recorded when it ends, with its parent, kind,
// attributes (the last value of a key), events, errors and status by the
// SDK's rules; its provider makes children in the same trace.
func TestSpans(t *testing.T) {
	rec := oteltest.New(t)
	ctx, parent := rec.TracerProvider.Tracer("test").Start(context.Background(), "parent")
	_, child := parent.TracerProvider().Tracer(scope).Start(ctx, "child",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.Int("n", 1)))
	if !child.IsRecording() || len(rec.Ended("child")) != 0 {
		t.Fatal("a started span does not record, or is recorded before it ends")
	}
	child.SetAttributes(attribute.Int("n", 2), attribute.String("s", "x"))
	child.AddEvent("ev", trace.WithAttributes(attribute.Bool("b", true)))
	child.RecordError(errors.New("bad"))
	child.SetStatus(codes.Error, "why")
	child.SetStatus(codes.Unset, "")
	child.End()
	child.SetAttributes(attribute.String("late", "y"))
	child.End()
	if child.IsRecording() {
		t.Error("an ended span records")
	}
	parent.SetStatus(codes.Ok, "ignored")
	parent.SetStatus(codes.Error, "after ok")
	parent.End()

	cs := rec.Ended("child")
	if len(cs) != 1 {
		t.Fatalf("%d child spans recorded, want 1", len(cs))
	}
	c, p := cs[0], rec.Ended("parent")[0]
	if c.Parent.SpanID() != p.SpanContext.SpanID() || c.SpanContext.TraceID() != p.SpanContext.TraceID() || p.Parent.IsValid() {
		t.Errorf("child %v of parent %v: not its child in its trace", c.SpanContext, p.SpanContext)
	}
	if c.SpanContext.SpanID() == p.SpanContext.SpanID() || !c.SpanContext.IsSampled() {
		t.Errorf("span IDs %v and %v, want distinct, sampled", c.SpanContext, p.SpanContext)
	}
	if c.Kind != trace.SpanKindClient || p.Kind != trace.SpanKindInternal || c.Scope != scope {
		t.Errorf("kinds %v and %v, scope %q", c.Kind, p.Kind, c.Scope)
	}
	wantAttrs := []attribute.KeyValue{attribute.Int("n", 2), attribute.String("s", "x")}
	if !reflect.DeepEqual(c.Attributes, wantAttrs) || oteltest.Attr(c, "n") != "2" || oteltest.Attr(c, "late") != "" {
		t.Errorf("attributes %v, want %v", c.Attributes, wantAttrs)
	}
	if len(c.Events) != 2 || c.Events[0].Name != "ev" || c.Events[1].Name != "exception" ||
		!slices.Contains(c.Events[1].Attributes, attribute.String("exception.message", "bad")) {
		t.Errorf("events %+v, want ev and an exception", c.Events)
	}
	if c.Status != (oteltest.Status{Code: codes.Error, Description: "why"}) || p.Status != (oteltest.Status{Code: codes.Ok}) {
		t.Errorf("statuses %+v and %+v, want Error why and Ok", c.Status, p.Status)
	}
	if text := rec.Text(); !strings.Contains(text, "child why") || !strings.Contains(text, "exception.message=bad") || !strings.Contains(text, "b=true") {
		t.Errorf("Text lacks what the spans say:\n%s", text)
	}
}

// TestStopsWithTheTest: once its test has ended, a recorder records
// nothing more, as the SDK's providers once shut down.
func TestStopsWithTheTest(t *testing.T) {
	var rec *oteltest.Recorder
	t.Run("inner", func(t *testing.T) { rec = oteltest.New(t) })
	_, s := rec.TracerProvider.Tracer(scope).Start(context.Background(), "late")
	if s.IsRecording() {
		t.Error("a span started after the test records")
	}
	s.End()
	c, _ := rec.MeterProvider.Meter(scope).Int64Counter("late")
	c.Add(context.Background(), 1)
	if len(rec.Ended("late")) != 0 || len(rec.Collect(t)) != 0 {
		t.Error("recorded after the test ended")
	}
}
