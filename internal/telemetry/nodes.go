package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsync-dev/dsync/backends"
)

// NodeOp is a request a Redlock driver sends to one node.
type NodeOp uint8

const (
	NodeAcquire  NodeOp = iota
	NodeFence           // the fencing token's write-back
	NodeWithdraw        // the release of a failed attempt
	NodeRefresh
	NodeRelease
	NodeHolder
	NodePing // Health's probe
	numNodeOps
)

var nodeOpNames = [numNodeOps]string{"acquire", "fence", "withdraw", "refresh", "release", "holder", "ping"}

var nodeSpanNames = func() (names [numNodeOps]string) {
	for op, n := range nodeOpNames {
		names[op] = "dsync.redlock." + n
	}
	return names
}()

// The outcomes of a node request.
const (
	nodeOK = iota
	nodeRefused
	nodeNotHeld
	nodeTimeout
	nodeError
	numNodeOutcomes
)

var nodeOutcomeNames = [numNodeOutcomes]string{"ok", "refused", "not_held", "timeout", "error"}

// Nodes is the telemetry of a Redlock driver's nodes: each request's
// latency and outcome, child spans of the caller's, and the restart
// quarantine (gauges, a counter and log lines).
type Nodes struct {
	log         *slog.Logger
	meter       metric.Meter
	duration    metric.Float64Histogram
	quarantines metric.Int64Counter
	reg         metric.Registration // the gauges' callback; nil if refused
	nodes       []nodeAttrs
}

type nodeAttrs struct {
	index   int
	addr    string
	start   []trace.SpanStartOption // a client span, with span
	span    []attribute.KeyValue
	request [numNodeOps][numNodeOutcomes][]metric.RecordOption
	add     []metric.AddOption
	observe []metric.ObserveOption
}

// NewNodes returns the telemetry of a driver's nodes, by index, at addrs
// (host:port). Only s.MeterProvider and s.Logger are used: a node's span
// is a child of the caller's, made by its tracer provider. An instrument
// the meter provider refuses records nothing.
func NewNodes(s Settings, addrs []string) *Nodes {
	mp := s.MeterProvider
	if mp == nil {
		mp = otelMeterProvider()
	}
	m := instruments{meter: mp.Meter(ScopeName)}
	n := &Nodes{log: s.Logger, meter: m.meter}
	n.duration = m.seconds("dsync.redlock.node.request.duration", "Time a request to one Redlock node took, by operation and outcome: ok, refused, not_held, timeout, error.")
	n.quarantines = m.counter("dsync.redlock.node.quarantines", "{quarantine}", "Restart quarantines begun: a node's server process was younger than max_ttl when the driver connected.")
	for i, addr := range addrs {
		a := nodeAttrs{index: i, addr: addr}
		a.span = []attribute.KeyValue{keyBackend.String("redlock"), keyNode.Int(i)}
		if host, port, err := net.SplitHostPort(addr); err == nil {
			a.span = append(a.span, keyAddress.String(host))
			if p, err := strconv.Atoi(port); err == nil {
				a.span = append(a.span, keyPort.Int(p))
			}
		}
		with := func(more ...attribute.KeyValue) metric.MeasurementOption {
			return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), a.span...), more...)...))
		}
		for op := range numNodeOps {
			for o := range numNodeOutcomes {
				a.request[op][o] = []metric.RecordOption{with(keyOperation.String(nodeOpNames[op]), keyOutcome.String(nodeOutcomeNames[o]))}
			}
		}
		a.add = []metric.AddOption{with()}
		a.observe = []metric.ObserveOption{with()}
		a.start = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(a.span...)}
		n.nodes = append(n.nodes, a)
	}
	return n
}

// ObserveQuarantine makes the quarantine gauges, which call until(i) for
// node i's quarantine end (zero or past while it votes) at every
// collection, until Close. Call it once, when until works.
func (n *Nodes) ObserveQuarantine(until func(i int) time.Time) {
	m := instruments{meter: n.meter}
	quarantined, err := m.meter.Int64ObservableGauge("dsync.redlock.node.quarantined", metric.WithUnit("{node}"),
		metric.WithDescription("1 while the node is in restart quarantine (its vote does not count), else 0."))
	m.keep(err)
	end, err := m.meter.Float64ObservableGauge("dsync.redlock.node.quarantine.until", metric.WithUnit("s"),
		metric.WithDescription("The end of the node's restart quarantine, in seconds since the Unix epoch; reported while it lasts."))
	m.keep(err)
	if m.err != nil || quarantined == nil || end == nil {
		return
	}
	n.reg, _ = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		for i := range n.nodes {
			if u := until(i); u.After(now) {
				o.ObserveInt64(quarantined, 1, n.nodes[i].observe...)
				o.ObserveFloat64(end, float64(u.UnixNano())/1e9, n.nodes[i].observe...)
			} else {
				o.ObserveInt64(quarantined, 0, n.nodes[i].observe...)
			}
		}
		return nil
	}, quarantined, end)
}

// Close stops the gauges' callback.
func (n *Nodes) Close() {
	if n.reg != nil {
		_ = n.reg.Unregister()
	}
}

// NodeCall observes one request to one node.
type NodeCall struct {
	n     *Nodes
	i     int
	op    NodeOp
	start time.Time
	span  trace.Span
}

// Start begins op on node i. When the span in caller (the ctx of the
// driver call the request is part of) records, the request gets a child
// span, put in nodeCtx (which bounds the request); otherwise nodeCtx is
// returned as is.
func (n *Nodes) Start(caller, nodeCtx context.Context, i int, op NodeOp) (context.Context, NodeCall) {
	c := NodeCall{n: n, i: i, op: op, start: time.Now()}
	parent := trace.SpanFromContext(caller)
	if !parent.IsRecording() {
		return nodeCtx, c
	}
	tracer := parent.TracerProvider().Tracer(ScopeName)
	nodeCtx, c.span = tracer.Start(trace.ContextWithSpan(nodeCtx, parent), nodeSpanNames[op], n.nodes[i].start...)
	return nodeCtx, c
}

// End records the request's latency and outcome; err is its error.
func (c NodeCall) End(ctx context.Context, err error) {
	o := nodeOutcome(err)
	c.n.duration.Record(ctx, time.Since(c.start).Seconds(), c.n.nodes[c.i].request[c.op][o]...)
	if c.span != nil {
		c.span.SetAttributes(keyOutcome.String(nodeOutcomeNames[o]))
		if o == nodeTimeout || o == nodeError {
			c.span.SetStatus(codes.Error, err.Error())
		}
		c.span.End()
	}
}

func nodeOutcome(err error) int {
	switch {
	case err == nil:
		return nodeOK
	case errors.Is(err, backends.ErrNotAcquired):
		return nodeRefused
	case errors.Is(err, backends.ErrNotHeld):
		return nodeNotHeld
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isNetTimeout(err):
		return nodeTimeout
	}
	return nodeError
}

// isNetTimeout is apart so that nodeOutcome(nil) allocates nothing (the
// target of errors.As escapes).
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Quarantined records that node i is in restart quarantine until until:
// a new one (begun, restarted true when the node's server process is
// another than the driver knew), or one made longer.
func (n *Nodes) Quarantined(i int, until time.Time, restarted bool) {
	a := &n.nodes[i]
	n.quarantines.Add(context.Background(), 1, a.add...)
	reason := "its server process is younger than max_ttl"
	if restarted {
		reason = "its server restarted"
	}
	n.logNode(slog.LevelInfo, "dsync: redlock node quarantined: its vote does not count until max_ttl has passed since its start", a,
		slog.Time("until", until), slog.Duration("for", time.Until(until).Round(time.Millisecond)), slog.String("reason", reason))
}

// RestartedDurable records that node i restarted and votes at once: it
// persists every write before answering.
func (n *Nodes) RestartedDurable(i int) {
	n.logNode(slog.LevelInfo, "dsync: redlock node restarted, not quarantined: it persists every write (AOF, appendfsync always)", &n.nodes[i])
}

// Back records that node i's quarantine has ended.
func (n *Nodes) Back(i int) {
	n.logNode(slog.LevelInfo, "dsync: redlock node back from quarantine: its vote counts again", &n.nodes[i])
}

// Log writes a line about the driver, if it has a logger.
func (n *Nodes) Log(level slog.Level, msg string, as ...slog.Attr) {
	if n.log == nil || !n.log.Enabled(context.Background(), level) {
		return
	}
	n.log.LogAttrs(context.Background(), level, msg, append([]slog.Attr{slog.String("backend", "redlock")}, as...)...)
}

func (n *Nodes) logNode(level slog.Level, msg string, a *nodeAttrs, as ...slog.Attr) {
	n.Log(level, msg, append([]slog.Attr{slog.Int("node", a.index), slog.String("addr", a.addr)}, as...)...)
}
