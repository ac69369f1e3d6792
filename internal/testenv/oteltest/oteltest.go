// Package oteltest records what dsync's telemetry reports, for tests: an
// OpenTelemetry SDK meter provider with a manual reader, a tracer provider
// with a span recorder, and a logger into a buffer, wired as one
// dsync.Telemetry. For tests only.
package oteltest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dsync-dev/dsync"
)

// Recorder holds what one backend's telemetry reported.
type Recorder struct {
	Reader         *sdkmetric.ManualReader
	MeterProvider  *sdkmetric.MeterProvider
	Spans          *tracetest.SpanRecorder
	TracerProvider *sdktrace.TracerProvider
	logs           lockedBuffer
}

// New returns a recorder whose providers shut down when the test ends.
// Log lines of every level are kept, as JSON.
func New(t testing.TB) *Recorder {
	r := &Recorder{Reader: sdkmetric.NewManualReader(), Spans: tracetest.NewSpanRecorder()}
	r.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.Reader))
	r.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.Spans))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.MeterProvider.Shutdown(ctx)
		_ = r.TracerProvider.Shutdown(ctx)
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

// Collect reads every metric now.
func (r *Recorder) Collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/dsync-dev/dsync" {
			t.Errorf("instrument scope %q, want the module path", sm.Scope.Name)
		}
		out = append(out, sm.Metrics...)
	}
	return out
}

// Point is one data point of a metric, whatever its kind: Value is a
// counter's or gauge's value, or a histogram's sum; Count is a histogram's
// count (1 for the others).
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

// Points returns the data points of the metric named name whose attributes
// include every key=value of match ("dsync.outcome", "acquired", ...).
func Points(ms []metricdata.Metrics, name string, match ...string) []Point {
	var out []Point
	keep := func(set attribute.Set) bool {
		for i := 0; i+1 < len(match); i += 2 {
			v, ok := set.Value(attribute.Key(match[i]))
			if !ok || v.String() != match[i+1] {
				return false
			}
		}
		return true
	}
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if keep(p.Attributes) {
					out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Value), Count: 1})
				}
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				if keep(p.Attributes) {
					out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Value), Count: 1})
				}
			}
		case metricdata.Gauge[float64]:
			for _, p := range d.DataPoints {
				if keep(p.Attributes) {
					out = append(out, Point{Attrs: p.Attributes, Value: p.Value, Count: 1})
				}
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				if keep(p.Attributes) {
					mx, _ := p.Max.Value()
					out = append(out, Point{Attrs: p.Attributes, Value: p.Sum, Count: p.Count, Max: mx})
				}
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				if keep(p.Attributes) {
					mx, _ := p.Max.Value()
					out = append(out, Point{Attrs: p.Attributes, Value: float64(p.Sum), Count: p.Count, Max: float64(mx)})
				}
			}
		}
	}
	return out
}

// Sum adds up the values (histograms: the sums) and counts of the matching
// points of name.
func Sum(ms []metricdata.Metrics, name string, match ...string) (value float64, count uint64) {
	for _, p := range Points(ms, name, match...) {
		value += p.Value
		count += p.Count
	}
	return value, count
}

// Ended returns the ended spans named name.
func (r *Recorder) Ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the value of a span's attribute key, or "" if absent.
func Attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// Text is everything the spans say (names, attributes, events, status),
// for searching for what must not be there.
func (r *Recorder) Text() string {
	var b strings.Builder
	for _, s := range r.Spans.Ended() {
		b.WriteString(s.Name() + " " + s.Status().Description + "\n")
		for _, kv := range s.Attributes() {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
		for _, e := range s.Events() {
			b.WriteString(e.Name + "\n")
			for _, kv := range e.Attributes {
				b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
			}
		}
	}
	return b.String()
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
