package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsync-dev/dsync/backends"
)

// Kind is the primitive a lease serves.
type Kind uint8

const (
	Lock Kind = iota
	Semaphore
	Election
	numKinds
)

var kindNames = [numKinds]string{"lock", "semaphore", "election"}

// Op is a blocking call on a primitive or a lease.
type Op uint8

const (
	Acquire Op = iota
	TryAcquire
	Extend
	Release
	numOps
)

// spanNames name each call's span: an election's Acquire is its Campaign,
// its Release is Resign.
var spanNames = [numKinds][numOps]string{
	{"dsync.Acquire", "dsync.TryAcquire", "dsync.Extend", "dsync.Release"},
	{"dsync.Acquire", "dsync.TryAcquire", "dsync.Extend", "dsync.Release"},
	{"dsync.Campaign", "dsync.TryAcquire", "dsync.Extend", "dsync.Resign"},
}

// The outcomes of an acquisition call.
const (
	acquired = iota
	contended
	unavailable // the backend could not decide (backends.ErrUnavailable)
	timedOut
	failed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"acquired", "contended", "unavailable", "timed_out", "error"}

// ExtendOutcome is what an Extend call came to.
type ExtendOutcome uint8

const (
	Extended      ExtendOutcome = iota
	ExtendLimit                 // refused at the lease's bound
	ExtendNotHeld               // the hold was gone, or the lease had ended
	ExtendFailed                // no answer: the lease stays valid until it expires
	numExtendOutcomes
)

var extendNames = [numExtendOutcomes]string{"extended", "limit", "not_held", "error"}

// Cause is why a lease ended.
type Cause uint8

const (
	Released       Cause = iota
	Gone                 // an extension found the hold gone
	Expired              // the validity ran out
	ExtensionBound       // the validity ran out after auto-extension stopped at its bound
	numCauses
)

var causeNames = [numCauses]string{"released", "gone", "expired", "extension_bound"}

// The changes of an election's term.
const (
	won = iota
	resigned
	lostTerm
	observed
	numChanges
)

var changeNames = [numChanges]string{"won", "resigned", "lost", "observed"}

// attrs are the attribute sets of one primitive's measurements, made once
// so that recording allocates nothing.
type attrs struct {
	kind    Kind
	span    []attribute.KeyValue                  // backend, primitive[, key]
	start   []trace.SpanStartOption               // internal, with span
	attempt [numOutcomes]trace.EventOption        // an attempt's event, by outcome
	acquire [2][numOutcomes][]metric.RecordOption // by Op (Acquire, TryAcquire) and outcome
	hold    [2][]metric.RecordOption              // released, lost
	extend  [numExtendOutcomes][]metric.AddOption // by outcome
	lost    [numCauses][]metric.AddOption         // by cause
	change  [numChanges][]metric.AddOption        // by change
	add     []metric.AddOption                    // backend, primitive[, key]
	record  []metric.RecordOption                 // backend, primitive[, key]
	observe []metric.ObserveOption                // backend, primitive[, key]

	active  atomic.Int64 // leases held now
	leading atomic.Int64 // terms led now (elections)
}

func (t *T) newAttrs(kind Kind, key string) *attrs {
	base := []attribute.KeyValue{keyBackend.String(t.backend), keyPrimitive.String(kindNames[kind])}
	if key != "" {
		base = append(base, keyKey.String(key))
	}
	with := func(more ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), more...)...))
	}
	a := &attrs{kind: kind, span: base}
	a.start = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(base...)}
	for o := range numOutcomes {
		a.attempt[o] = trace.WithAttributes(keyOutcome.String(outcomeNames[o]))
	}
	for op, name := range []string{"acquire", "try_acquire"} {
		for o := range numOutcomes {
			a.acquire[op][o] = []metric.RecordOption{with(keyOperation.String(name), keyOutcome.String(outcomeNames[o]))}
		}
	}
	a.hold[0] = []metric.RecordOption{with(keyOutcome.String("released"))}
	a.hold[1] = []metric.RecordOption{with(keyOutcome.String("lost"))}
	for o := range numExtendOutcomes {
		a.extend[o] = []metric.AddOption{with(keyOutcome.String(extendNames[o]))}
	}
	for c := range numCauses {
		a.lost[c] = []metric.AddOption{with(keyCause.String(causeNames[c]))}
	}
	for c := range numChanges {
		a.change[c] = []metric.AddOption{with(keyChange.String(changeNames[c]))}
	}
	a.add = []metric.AddOption{with()}
	a.record = []metric.RecordOption{with()}
	a.observe = []metric.ObserveOption{with()}
	return a
}

// Prim is the telemetry of one primitive: one key (a lock, a semaphore,
// an election) of one backend.
type Prim struct {
	t         *T
	a         *attrs
	key       string // for log lines
	candidate string // an election's candidate ID, for log lines
}

// Prim returns the telemetry of kind on key; candidate is an election's
// candidate ID (empty for the others). The key is an attribute only with
// Settings.KeyAttributes; then each key's attribute sets are made once and
// kept as long as the backend, as the SDK keeps each key's series.
func (t *T) Prim(kind Kind, key, candidate string) *Prim {
	a := t.prims[kind]
	if t.keys {
		t.mu.Lock()
		k := kindKey{kind, key}
		if a = t.byKey[k]; a == nil {
			a = t.newAttrs(kind, key)
			t.byKey[k] = a
		}
		t.mu.Unlock()
	}
	return &Prim{t: t, a: a, key: key, candidate: candidate}
}

// Call observes one blocking call (Start to one of its ends: Acquired,
// Extended, Released): its span, its attempts, its time.
type Call struct {
	p         *Prim
	op        Op
	start     time.Time
	attemptAt time.Time // start of the latest attempt
	attempts  int
	last      int // the latest attempt's outcome
	span      trace.Span
}

// Start begins a call of op and returns ctx with the call's span, when
// tracing is on, for the calls it makes to the driver.
func (p *Prim) Start(ctx context.Context, op Op) (context.Context, Call) {
	c := Call{p: p, op: op, start: time.Now()}
	ctx, c.span = p.t.startSpan(ctx, spanNames[p.a.kind][op], p.a.start)
	return ctx, c
}

// Attempting marks the start of an attempt.
func (c *Call) Attempting() {
	c.attempts++
	if c.op == TryAcquire {
		c.attemptAt = c.start // its one attempt goes out at once
		return
	}
	c.attemptAt = time.Now()
}

// Attempted records an attempt's result, as an event of the call's span;
// a failed attempt's event carries its error's text, which says why (what
// was taken, or why the backend could not decide).
func (c *Call) Attempted(err error) {
	c.last = attemptOutcome(err)
	if c.span == nil {
		return
	}
	o := c.last
	if o == failed || o == unavailable {
		c.span.AddEvent("dsync.attempt", c.p.a.attempt[o], trace.WithAttributes(attribute.String("exception.message", err.Error())))
		return
	}
	if o == acquired && c.attempts == 1 {
		return // the span says it all: one attempt, acquired
	}
	c.span.AddEvent("dsync.attempt", c.p.a.attempt[o])
}

// attemptOutcome classifies an attempt's error as the SPI does: contention
// matches ErrNotAcquired and not ErrUnavailable; a failure the backend
// could not decide matches ErrUnavailable; anything else (invalid, closed,
// unsupported) is an error.
func attemptOutcome(err error) int {
	switch {
	case err == nil:
		return acquired
	case errors.Is(err, backends.ErrUnavailable):
		return unavailable
	case errors.Is(err, backends.ErrNotAcquired):
		return contended
	}
	return failed
}

// Acquired ends an acquisition call (Acquire, TryAcquire): its duration
// by outcome, and for Acquire (which blocks) its wait and attempts; and,
// when it got a lease with fencing token fence, the lease's start (and an
// election's term).
func (c *Call) Acquired(ctx context.Context, fence uint64, err error) {
	now := time.Now()
	o := acquired
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		o = timedOut
	case c.attempts > 0 && (c.last == contended || c.last == unavailable):
		o = c.last
	case errors.Is(err, backends.ErrUnavailable):
		o = unavailable
	default:
		o = failed
	}
	wait := now.Sub(c.start)
	if c.attempts > 0 {
		wait = c.attemptAt.Sub(c.start)
	}
	t, a := c.p.t, c.p.a
	opts := a.acquire[min(c.op, TryAcquire)][o]
	t.acquireDuration.Record(ctx, now.Sub(c.start).Seconds(), opts...)
	if c.op != TryAcquire { // one attempt and no wait, by contract
		t.acquireWait.Record(ctx, wait.Seconds(), opts...)
		t.acquireAttempts.Record(ctx, int64(c.attempts), opts...)
	}
	if err == nil {
		c.p.held(ctx, fence)
	}
	if c.span != nil {
		kv := [4]attribute.KeyValue{keyOutcome.String(outcomeNames[o]), tokenAttr(fence), keyAttempts.Int(c.attempts), keyWait.Float64(wait.Seconds())}
		first, last := 0, len(kv)
		if c.op == TryAcquire {
			last = 2 // one attempt and no wait, by contract
		}
		if err != nil {
			kv[1], first = kv[0], 1 // no token
		}
		c.span.SetAttributes(kv[first:last]...)
		c.endSpan(err, o == failed || o == unavailable || o == timedOut)
	}
}

// Extended ends an Extend call.
func (c *Call) Extended(ctx context.Context, o ExtendOutcome, err error) {
	p := c.p
	p.t.extensions.Add(ctx, 1, p.a.extend[o]...)
	switch o {
	case ExtendFailed:
		p.log(ctx, slog.LevelWarn, "dsync: lease extension failed; the lease stays valid until it expires", slog.String("error", err.Error()))
	case ExtendLimit:
		p.log(ctx, slog.LevelWarn, "dsync: lease extension refused at its bound; the lease ends when its validity runs out", slog.String("error", err.Error()))
	}
	if c.span != nil {
		c.span.SetAttributes(keyOutcome.String(extendNames[o]))
		c.endSpan(err, o != Extended)
	}
}

// Released ends a Release call (an election's Resign).
func (c *Call) Released(err error) {
	if c.span == nil {
		return
	}
	o := "released"
	switch {
	case errors.Is(err, backends.ErrNotHeld):
		o = "not_held"
	case err != nil:
		o = "error"
	}
	if err != nil { // a span without an outcome released the hold
		c.span.SetAttributes(keyOutcome.String(o))
	}
	c.endSpan(err, err != nil)
}

func (c *Call) endSpan(err error, bad bool) {
	if bad && err != nil {
		c.span.SetStatus(codes.Error, err.Error())
	}
	c.span.End()
}

// tokenAttr is the fencing token as an attribute: an int64 when it fits.
func tokenAttr(fence uint64) attribute.KeyValue {
	if fence > math.MaxInt64 {
		return keyToken.String(strconv.FormatUint(fence, 10))
	}
	return keyToken.Int64(int64(fence))
}

// held records the start of a lease, and of an election's term.
func (p *Prim) held(ctx context.Context, fence uint64) {
	t, a := p.t, p.a
	a.active.Add(1)
	if a.kind != Election {
		return
	}
	a.leading.Add(1)
	t.termChanges.Add(ctx, 1, a.change[won]...)
	p.log(ctx, slog.LevelInfo, "dsync: leading", slog.Uint64("term", fence))
}

// Ended records the end of a lease acquired at acquired: its hold time,
// and its loss with the cause; err is the loss. It is called with the
// lease's lock held, once per lease.
func (p *Prim) Ended(acquired time.Time, cause Cause, err error) {
	ctx := context.Background()
	t, a := p.t, p.a
	held := time.Since(acquired)
	lost := 0
	if cause != Released {
		lost = 1
		t.lost.Add(ctx, 1, a.lost[cause]...)
	}
	t.holdDuration.Record(ctx, held.Seconds(), a.hold[lost]...)
	a.active.Add(-1)
	if a.kind == Election {
		a.leading.Add(-1)
		if cause == Released {
			t.termChanges.Add(ctx, 1, a.change[resigned]...)
			p.log(ctx, slog.LevelInfo, "dsync: resigned", slog.Duration("held", held))
			return
		}
		t.termChanges.Add(ctx, 1, a.change[lostTerm]...)
	}
	if cause != Released {
		msg := "dsync: lease lost"
		if a.kind == Election {
			msg = "dsync: leadership lost"
		}
		p.log(ctx, slog.LevelWarn, msg, slog.String("cause", causeNames[cause]), slog.Duration("held", held), slog.String("error", err.Error()))
	}
}

// Failover records the time from the previous leader's last renewal, as
// a candidate estimated it, to the candidate's own term.
func (p *Prim) Failover(ctx context.Context, d time.Duration) {
	p.t.failover.Record(ctx, d.Seconds(), p.a.record...)
	p.log(ctx, slog.LevelInfo, "dsync: took over from the previous leader", slog.Duration("failover", d))
}

// Observed records a change of leader seen by an observer: id leads now
// in term, or nobody when id is empty.
func (p *Prim) Observed(ctx context.Context, id string, term uint64) {
	p.t.termChanges.Add(ctx, 1, p.a.change[observed]...)
	p.log(ctx, slog.LevelInfo, "dsync: leader changed", slog.String("leader", id), slog.Uint64("term", term))
}

// log writes one line about p, if the backend has a logger.
func (p *Prim) log(ctx context.Context, level slog.Level, msg string, more ...slog.Attr) {
	l := p.t.log
	if l == nil || !l.Enabled(ctx, level) {
		return
	}
	as := []slog.Attr{slog.String("backend", p.t.backend), slog.String("primitive", kindNames[p.a.kind])}
	if p.a.kind == Election {
		as = append(as, slog.String("election", p.key), slog.String("candidate", p.candidate))
	} else {
		as = append(as, slog.String("key", p.key))
	}
	l.LogAttrs(ctx, level, msg, append(as, more...)...)
}

// LostWhileRunning records on the span in ctx (the caller's of dsync.Do)
// that the lease it ran under was lost while its function ran.
func LostWhileRunning(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("dsync.lease.lost", trace.WithAttributes(attribute.String("exception.message", err.Error())))
}
