package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	_ "github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/oteltest"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/retry"
	"github.com/dsync-dev/dsync/semaphore"
)

// The scenarios run on real redis-server processes: each shows that what
// happens to a lease moves the metric family that reports it, with the
// spans and log lines that go with it. Worker processes (the killed
// leader) are backendtest's.
func TestMain(m *testing.M) { backendtest.Main(m) }

// openWith opens url with its telemetry sent to rec (nil: the default,
// the global providers), closed when the test ends.
func openWith(t *testing.T, url string, rec *oteltest.Recorder) *dsync.Backend {
	t.Helper()
	opts := &dsync.BackendOptions{}
	if rec != nil {
		opts.Telemetry = rec.Telemetry(true)
	}
	b, err := dsync.OpenWith(testutil.Context(t), url, opts)
	if err != nil {
		t.Fatalf("OpenWith: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func newLocker(t *testing.T, b *dsync.Backend, key string, o *locker.Options) *locker.Locker {
	t.Helper()
	l, err := locker.New(b, key, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// want fails the test unless got is in [lo, hi].
func want[N int | uint64 | float64](t *testing.T, what string, got, lo, hi N) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %v, want within [%v, %v]", what, got, lo, hi)
	}
}

// redisKey is where the redis backend keeps a lock's hold.
func redisKey(key string) string { return "dsync:{" + key + "}" }

// TestContendedLockRaisesAttemptsAndWait: a lock held by another client
// makes TryAcquire contended, an Acquire with a short deadline timed out,
// and an Acquire that outlasts the holder acquired after several attempts
// and a wait as long as the holder kept it; its span has the attempts as
// events, the wait and the fencing token.
func TestContendedLockRaisesAttemptsAndWait(t *testing.T) {
	srv := redistest.Start(t, nil)
	rec := oteltest.New(t)
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	holder := testutil.MustAcquire(t, ctx, newLocker(t, openWith(t, srv.URL(), nil), key, nil))
	fast, err := retry.NewConstant(&retry.ConstantOptions{Delay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, openWith(t, srv.URL(), rec), key, &locker.Options{Retry: fast})

	if _, err := l.TryAcquire(ctx); !errors.Is(err, dsync.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = l.Acquire(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	const held = 300 * time.Millisecond
	released := make(chan error, 1)
	go func() {
		time.Sleep(held) // the time the holder keeps the lock
		released <- holder.Release(ctx)
	}()
	start := time.Now()
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	ms := rec.Collect(t)
	acq := []string{"dsync.backend", "redis", "dsync.primitive", "lock", "dsync.key", key, "dsync.operation", "acquire", "dsync.outcome", "acquired"}
	attempts, n := oteltest.Sum(ms, "dsync.acquire.attempts", acq...)
	want(t, "acquisitions", n, 1, 1)
	want(t, "attempts of the acquisition that outlasted the holder", attempts, 2, 100)
	wait, _ := oteltest.Sum(ms, "dsync.acquire.wait", acq...)
	want(t, "its wait (s)", wait, (held - 150*time.Millisecond).Seconds(), waited.Seconds())
	took, _ := oteltest.Sum(ms, "dsync.acquire.duration", acq...)
	want(t, "its duration (s)", took, wait, waited.Seconds())
	_, n = oteltest.Sum(ms, "dsync.acquire.duration", "dsync.operation", "try_acquire", "dsync.outcome", "contended")
	want(t, "contended TryAcquires", n, 1, 1)
	timedOut, n := oteltest.Sum(ms, "dsync.acquire.attempts", "dsync.operation", "acquire", "dsync.outcome", "timed_out")
	want(t, "timed-out Acquires", n, 1, 1)
	want(t, "their attempts", timedOut, 1, 100)
	_, n = oteltest.Sum(ms, "dsync.lease.hold.duration", "dsync.outcome", "released")
	want(t, "leases held and released", n, 1, 1)
	active, _ := oteltest.Sum(ms, "dsync.lease.active")
	want(t, "leases active at the end", active, 0, 0)

	var span bool
	for _, s := range rec.Ended("dsync.Acquire") {
		if oteltest.Attr(s, "dsync.outcome") != "acquired" {
			continue
		}
		span = true
		events := 0
		for _, e := range s.Events {
			if e.Name == "dsync.attempt" {
				events++
			}
		}
		if got := oteltest.Attr(s, "dsync.attempts"); got != fmt.Sprint(events) || events < 2 {
			t.Errorf("Acquire span: %d attempt events, dsync.attempts %s; want the same, at least 2", events, got)
		}
		if got := oteltest.Attr(s, "dsync.token"); got != fmt.Sprint(lease.Token()) {
			t.Errorf("Acquire span's token %s, want %d", got, lease.Token())
		}
		if oteltest.Attr(s, "dsync.wait") == "" || oteltest.Attr(s, "dsync.key") != key {
			t.Errorf("Acquire span lacks the wait or the key: %v", s.Attributes)
		}
	}
	if !span {
		t.Error("no dsync.Acquire span with outcome acquired")
	}
	if len(rec.Ended("dsync.TryAcquire")) != 1 || len(rec.Ended("dsync.Release")) != 1 {
		t.Errorf("%d TryAcquire and %d Release spans, want 1 each", len(rec.Ended("dsync.TryAcquire")), len(rec.Ended("dsync.Release")))
	}
}

// lossCase is a way to lose a lease that auto-extends every 150 ms with a
// TTL of 600 ms.
type lossCase struct {
	cause string             // the loss's cause
	opts  locker.Options     // beside the TTL and the interval
	via   bool               // the backend talks to the server through a proxy
	fault func(*lossFixture) // makes the lease lost
	// the extensions it takes, by outcome (at least)
	extensions map[string]float64
	log        string // a warning logged
}

type lossFixture struct {
	t      *testing.T
	client *goredis.Client
	proxy  *faultproxy.Proxy
	key    string
}

// TestLostLeaseByCause: a lease whose hold was deleted behind its back, a
// lease whose server was cut off, and a lease at its extension bound are
// each lost once, with their cause, the extensions that told, and a
// warning.
func TestLostLeaseByCause(t *testing.T) {
	srv := redistest.Start(t, nil)
	for _, c := range []lossCase{
		{
			cause: "gone",
			fault: func(f *lossFixture) {
				if err := f.client.Del(context.Background(), redisKey(f.key)).Err(); err != nil {
					f.t.Fatal(err)
				}
			},
			extensions: map[string]float64{"not_held": 1},
			log:        "dsync: lease lost",
		},
		{
			cause: "expired",
			via:   true,
			fault: func(f *lossFixture) {
				if err := f.proxy.Blackhole(); err != nil {
					f.t.Fatal(err)
				}
			},
			extensions: map[string]float64{"error": 1},
			log:        "dsync: lease extension failed",
		},
		{
			cause:      "extension_bound",
			opts:       locker.Options{MaxExtensions: 1},
			fault:      func(*lossFixture) {},
			extensions: map[string]float64{"extended": 1, "limit": 1},
			log:        "dsync: lease extension refused at its bound",
		},
	} {
		t.Run(c.cause, func(t *testing.T) {
			rec := oteltest.New(t)
			f := &lossFixture{t: t, client: srv.NewClient(t), key: testutil.UniqueKey(t)}
			url := srv.URL()
			if c.via {
				f.proxy = faultproxy.Start(t, srv.Addr())
				url = "redis://" + f.proxy.Addr()
			}
			o := c.opts
			o.TTL, o.ExtendInterval, o.AutoExtend = 600*time.Millisecond, 150*time.Millisecond, true
			lease := testutil.MustAcquire(t, testutil.Context(t), newLocker(t, openWith(t, url, rec), f.key, &o))
			c.fault(f)
			select {
			case <-lease.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("lease not lost 5 s after the fault")
			}
			if err := lease.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
				t.Fatalf("Err = %v, want ErrLeaseLost", err)
			}
			rctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = lease.Release(rctx) // ends nothing: the lease is lost
			cancel()
			ms := rec.Collect(t)
			for _, p := range oteltest.Points(ms, "dsync.lease.lost") {
				wantN := 0.0
				if p.Get("dsync.lease.cause") == c.cause {
					wantN = 1
				}
				if p.Value != wantN {
					t.Errorf("leases lost by %s: %v, want %v", p.Get("dsync.lease.cause"), p.Value, wantN)
				}
			}
			if n, _ := oteltest.Sum(ms, "dsync.lease.lost", "dsync.lease.cause", c.cause); n != 1 {
				t.Errorf("leases lost by %s: %v, want 1", c.cause, n)
			}
			for outcome, least := range c.extensions {
				n, _ := oteltest.Sum(ms, "dsync.lease.extensions", "dsync.outcome", outcome)
				want(t, "extensions "+outcome, n, least, 100)
			}
			_, n := oteltest.Sum(ms, "dsync.lease.hold.duration", "dsync.outcome", "lost")
			want(t, "leases held and lost", n, 1, 1)
			active, _ := oteltest.Sum(ms, "dsync.lease.active")
			want(t, "leases active at the end", active, 0, 0)
			logs := rec.Logs()
			for _, w := range []string{c.log, `"msg":"dsync: lease lost"`, `"cause":"` + c.cause + `"`, `"level":"WARN"`} {
				if !strings.Contains(logs, w) {
					t.Errorf("logs lack %s:\n%s", w, logs)
				}
			}
			if f.proxy != nil {
				_ = f.proxy.Heal()
			}
		})
	}
}

// TestSemaphorePermitsHeld: the leases active of a semaphore follow its
// permits as they are taken and given back.
func TestSemaphorePermitsHeld(t *testing.T) {
	srv := redistest.Start(t, nil)
	rec := oteltest.New(t)
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	s, err := semaphore.New(openWith(t, srv.URL(), rec), key, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := func(want float64) {
		t.Helper()
		got, _ := oteltest.Sum(rec.Collect(t), "dsync.lease.active", "dsync.primitive", "semaphore", "dsync.key", key)
		if got != want {
			t.Errorf("permits held = %v, want %v", got, want)
		}
	}
	p1 := testutil.MustAcquire(t, ctx, s)
	p2 := testutil.MustAcquire(t, ctx, s)
	held(2)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held(1)
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held(0)
}

// TestLeaderKilledChangesTerm: a candidate waiting behind a leader process
// that is killed takes over once the leader's hold expires: one term
// change (won), the is-leader gauge at 1, and a failover time of about
// the TTL; resigning brings the gauge back to 0.
func TestLeaderKilledChangesTerm(t *testing.T) {
	srv := redistest.Start(t, nil)
	rec := oteltest.New(t)
	ctx := testutil.Context(t)
	key := testutil.UniqueKey(t)
	const ttl = time.Second
	w := proc.Start(t, "leader-run", srv.URL(), map[string]string{"name": key, "id": "a", "ttl": ttl.String(), "tick": "100ms"})
	w.Expect(t, "ready", 30*time.Second)
	w.Expect(t, "leading", 10*time.Second)
	e, err := leader.New(openWith(t, srv.URL(), rec), key, "b", &leader.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   dsync.Leadership
		err error
	}
	won := make(chan result, 1)
	go func() {
		l, err := e.Campaign(ctx)
		won <- result{l, err}
	}()
	time.Sleep(ttl) // the candidate sees the leader renew its term
	killed := time.Now()
	w.Kill(t)
	var r result
	select {
	case r = <-won:
	case <-time.After(5 * ttl):
		t.Fatal("no takeover 5 TTLs after the leader was killed")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	took := time.Since(killed)
	ms := rec.Collect(t)
	changes, _ := oteltest.Sum(ms, "dsync.election.term.changes", "dsync.election.change", "won", "dsync.key", key)
	want(t, "terms won", changes, 1, 1)
	leading, _ := oteltest.Sum(ms, "dsync.election.leader")
	want(t, "is leader", leading, 1, 1)
	failover, n := oteltest.Sum(ms, "dsync.election.failover.duration")
	want(t, "failovers", n, 1, 1)
	// From the leader's last renewal, at most a renewal interval (TTL/3)
	// before it was killed, to the takeover.
	want(t, "failover (s)", failover, took.Seconds()-0.2, took.Seconds()+ttl.Seconds()/3+0.2)
	if err := r.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ms = rec.Collect(t)
	leading, _ = oteltest.Sum(ms, "dsync.election.leader")
	want(t, "is leader after Resign", leading, 0, 0)
	changes, _ = oteltest.Sum(ms, "dsync.election.term.changes", "dsync.election.change", "resigned")
	want(t, "terms resigned", changes, 1, 1)
	if len(rec.Ended("dsync.Campaign")) != 1 || len(rec.Ended("dsync.Resign")) != 1 {
		t.Errorf("%d Campaign and %d Resign spans, want 1 each", len(rec.Ended("dsync.Campaign")), len(rec.Ended("dsync.Resign")))
	}
	logs := rec.Logs()
	for _, w := range []string{`"msg":"dsync: leading"`, `"candidate":"b"`, `"msg":"dsync: took over from the previous leader"`, `"msg":"dsync: resigned"`} {
		if !strings.Contains(logs, w) {
			t.Errorf("logs lack %s:\n%s", w, logs)
		}
	}
	t.Logf("took over %v after the kill; failover seen %.3fs", took.Round(time.Millisecond), failover)
}

// TestLossWhileDoRunsOnCallerSpan: a lease lost while Do's function runs
// is an event of the span Do was called under.
func TestLossWhileDoRunsOnCallerSpan(t *testing.T) {
	srv := redistest.Start(t, nil)
	rec := oteltest.New(t)
	client := srv.NewClient(t)
	key := testutil.UniqueKey(t)
	l := newLocker(t, openWith(t, srv.URL(), rec), key, &locker.Options{TTL: 600 * time.Millisecond})
	ctx, span := rec.TracerProvider.Tracer("test").Start(testutil.Context(t), "nightly-job")
	err := dsync.Do(ctx, l, func(ctx context.Context) error {
		if err := client.Del(ctx, redisKey(key)).Err(); err != nil {
			return err
		}
		<-ctx.Done() // cancelled by the loss
		return nil
	})
	span.End()
	if !errors.Is(err, dsync.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost", err)
	}
	job := rec.Ended("nightly-job")
	if len(job) != 1 {
		t.Fatalf("%d caller spans", len(job))
	}
	found := false
	for _, e := range job[0].Events {
		found = found || e.Name == "dsync.lease.lost"
	}
	if !found {
		t.Errorf("the caller's span has no dsync.lease.lost event: %v", job[0].Events)
	}
	// Do's own calls are children of the caller's span.
	for _, name := range []string{"dsync.Acquire", "dsync.Extend", "dsync.Release"} {
		for _, s := range rec.Ended(name) {
			if s.Parent.SpanID() != job[0].SpanContext.SpanID() && name != "dsync.Extend" {
				t.Errorf("%s is not a child of the caller's span", name)
			}
		}
	}
}

// TestNoSecretsInTelemetry: a backend opened with a password, whose
// leases are lost (a hold deleted, a server cut off) and whose election is
// won and resigned, writes warnings and spans that never carry the
// password or a hold token.
func TestNoSecretsInTelemetry(t *testing.T) {
	const password = "s3cret-pw-7Hq"
	srv := redistest.Start(t, &redistest.Options{Password: password})
	proxy := faultproxy.Start(t, srv.Addr())
	rec := oteltest.New(t)
	ctx := testutil.Context(t)
	client := srv.NewClient(t)
	b := openWith(t, "redis://:"+password+"@"+proxy.Addr(), rec)
	var tokens []string
	hold := func(h any) { tok, _ := lease.HoldToken(h); tokens = append(tokens, tok) }
	o := &locker.Options{TTL: 600 * time.Millisecond, ExtendInterval: 150 * time.Millisecond, AutoExtend: true}

	gone := testutil.MustAcquire(t, ctx, newLocker(t, b, testutil.UniqueKey(t)+"-gone", o))
	hold(gone)
	if err := client.Del(ctx, redisKey(gone.Key())).Err(); err != nil {
		t.Fatal(err)
	}
	<-gone.Done()

	e, err := leader.New(b, testutil.UniqueKey(t)+"-election", "candidate-1", &leader.Options{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hold(term)
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	cut := testutil.MustAcquire(t, ctx, newLocker(t, b, testutil.UniqueKey(t)+"-cut", o))
	hold(cut)
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	<-cut.Done()
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_ = cut.Release(rctx) // awaits the extension that failed, and its warning
	cancel()
	_ = proxy.Heal()

	logs, spans := rec.Logs(), rec.Text()
	for _, w := range []string{"dsync: lease lost", "dsync: lease extension failed", "dsync: leading", "dsync: resigned"} {
		if !strings.Contains(logs, w) {
			t.Errorf("logs lack %q: the scenario did not run as planned:\n%s", w, logs)
		}
	}
	for _, secret := range append([]string{password}, tokens...) {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain the secret %q:\n%s", secret, logs)
		}
		if strings.Contains(spans, secret) {
			t.Errorf("spans contain the secret %q:\n%s", secret, spans)
		}
	}
}

// TestUnavailableBackendSaysWhy: against a stopped server, TryAcquire and
// an Acquire cut short by its retry policy end with the outcome
// unavailable (not contended, not error), and each attempt is an event of
// the call's span with the outcome and the error's text, which says why;
// contention stays contended (TestContendedLockRaisesAttemptsAndWait).
func TestUnavailableBackendSaysWhy(t *testing.T) {
	srv := redistest.Start(t, nil)
	rec := oteltest.New(t)
	ctx := testutil.Context(t)
	once, err := retry.NewConstant(&retry.ConstantOptions{Delay: 10 * time.Millisecond, MaxTries: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, openWith(t, srv.URL(), rec), testutil.UniqueKey(t), &locker.Options{Retry: once})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx); !errors.Is(err, dsync.ErrUnavailable) {
		t.Fatalf("TryAcquire on a stopped server = %v, want ErrUnavailable", err)
	}
	if _, err := l.Acquire(ctx); !errors.Is(err, dsync.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a stopped server, given up by its policy = %v, want ErrUnavailable", err)
	}

	ms := rec.Collect(t)
	for _, op := range []string{"try_acquire", "acquire"} {
		if _, n := oteltest.Sum(ms, "dsync.acquire.duration", "dsync.operation", op, "dsync.outcome", "unavailable"); n != 1 {
			t.Errorf("%s on a stopped server: %d recorded as unavailable, want 1", op, n)
		}
	}
	for _, name := range []string{"dsync.TryAcquire", "dsync.Acquire"} {
		spans := rec.Ended(name)
		if len(spans) != 1 {
			t.Fatalf("%d %s spans, want 1", len(spans), name)
		}
		s := spans[0]
		if oteltest.Attr(s, "dsync.outcome") != "unavailable" || len(s.Events) == 0 {
			t.Fatalf("%s span: outcome %q, %d events; want unavailable, with its attempts", name, oteltest.Attr(s, "dsync.outcome"), len(s.Events))
		}
		for _, ev := range s.Events {
			if ev.Name != "dsync.attempt" {
				continue
			}
			if !slices.Contains(ev.Attributes, attribute.String("dsync.outcome", "unavailable")) {
				t.Errorf("%s attempt event %v: want outcome unavailable", name, ev.Attributes)
			}
			var why string
			for _, a := range ev.Attributes {
				if a.Key == "exception.message" {
					why = a.Value.AsString()
				}
			}
			if !strings.Contains(why, srv.Addr()) && !strings.Contains(why, "refused") {
				t.Errorf("%s attempt event: exception.message %q does not say why", name, why)
			}
		}
	}
}
