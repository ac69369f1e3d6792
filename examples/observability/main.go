// Observability: dsync's metrics through the OpenTelemetry SDK and a
// Prometheus exporter, its spans to stdout, its warnings and notices to a
// slog logger. It runs contended locks, a semaphore, a lease lost by a
// holder that stalled past its TTL and a leader election with a hand-over,
// then prints the backend's health and what a dashboard would show.
//
//	go run ./examples/observability                       # memory backend
//	go run ./examples/observability -url redis://127.0.0.1:6379
//	go run ./examples/observability -listen :9464         # then serves /metrics until interrupted
//	go run ./examples/observability -spans /dev/null      # the dashboard only
//
// The library depends on the OpenTelemetry API only; this program is where
// the SDK and the exporters come in, as in any application.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"   // registers etcd://
	_ "github.com/dsync-dev/dsync/backends/memory" // registers memory://
	_ "github.com/dsync-dev/dsync/backends/redis"  // registers redis://
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	_ "github.com/dsync-dev/dsync/redlock" // registers redlock://
	"github.com/dsync-dev/dsync/semaphore"
)

func main() {
	url := flag.String("url", "memory://observability", "backend URL")
	workers := flag.Int("workers", 4, "goroutines contending for the lock")
	spans := flag.String("spans", "-", `where the spans go, one JSON object a line ("-": stdout)`)
	listen := flag.String("listen", "", "serve /metrics on this address after the run, until interrupted")
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	spanOut := io.Writer(os.Stdout)
	if *spans != "-" {
		f, err := os.Create(*spans)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		spanOut = f
	}
	reg := prometheus.NewRegistry()
	if err := run(ctx, config{url: *url, workers: *workers, registry: reg, spans: spanOut, out: os.Stdout, logs: os.Stderr}); err != nil {
		log.Fatal(err)
	}
	if *listen != "" {
		srv := &http.Server{Addr: *listen, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		fmt.Printf("serving http://%s/metrics until interrupted\n", *listen)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}
}

type config struct {
	url         string
	workers     int
	registry    *prometheus.Registry // the exporter registers here
	spans       io.Writer
	out, logs   io.Writer
	holdFor     time.Duration // each lock holder's work; default 20ms
	electionTTL time.Duration // the election's TTL; default 1s
}

// run wires the SDK, runs the scenario and prints the dashboard.
func run(ctx context.Context, c config) error {
	c.holdFor = cmp.Or(c.holdFor, 20*time.Millisecond)
	c.electionTTL = cmp.Or(c.electionTTL, time.Second)

	// Metrics: the SDK's meter provider, read by the Prometheus exporter.
	exporter, err := otelprom.New(otelprom.WithRegisterer(c.registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	// Spans: the SDK's tracer provider, batched to stdout.
	spanExporter, err := stdouttrace.New(stdouttrace.WithWriter(c.spans))
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spanExporter))
	defer func() {
		_ = tp.Shutdown(context.Background()) // flushes the spans
		_ = mp.Shutdown(context.Background())
	}()
	logger := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	b, err := dsync.OpenWith(ctx, c.url, &dsync.BackendOptions{Telemetry: dsync.Telemetry{
		MeterProvider:  mp,
		TracerProvider: tp,
		Logger:         logger,
		KeyAttributes:  true, // a handful of keys here: one series each is fine
	}})
	if err != nil {
		return err
	}
	defer b.Close()

	if err := contend(ctx, b, c); err != nil {
		return err
	}
	if err := loseOne(ctx, b); err != nil {
		return err
	}
	if err := elect(ctx, b, c); err != nil {
		return err
	}
	if err := tp.ForceFlush(ctx); err != nil {
		return err
	}
	h, err := b.Health(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\n== health of %s: ok=%v %s\n", b, h.OK, h.Reason)
	for _, n := range h.Nodes {
		fmt.Fprintf(c.out, "   %s reachable=%v latency=%v %s\n", n.Addr, n.Reachable, n.Latency.Round(time.Microsecond), n.Detail)
	}
	return dashboard(c.out, c.registry)
}

// contend runs workers that each take the lock "nightly-report" three
// times, and as many that share a semaphore of 2 "exports".
func contend(ctx context.Context, b *dsync.Backend, c config) error {
	l, err := locker.New(b, "nightly-report", nil)
	if err != nil {
		return err
	}
	s, err := semaphore.New(b, "exports", 2, nil)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*c.workers) // 3 locks and 1 permit a worker
	for range c.workers {
		wg.Go(func() {
			for range 3 {
				errs <- dsync.Do(ctx, l, func(ctx context.Context) error { return sleep(ctx, c.holdFor) })
			}
		})
		wg.Go(func() {
			errs <- dsync.Do(ctx, s, func(ctx context.Context) error { return sleep(ctx, c.holdFor) })
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// loseOne takes a lock and stalls past its TTL without extending it, as a
// holder paused by its machine would: the lease's validity runs out, and
// it is lost (a warning, dsync_lease_lost_total{dsync_lease_cause="expired"}).
func loseOne(ctx context.Context, b *dsync.Backend) error {
	l, err := locker.New(b, "cleanup", &locker.Options{TTL: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	select { // the stall: no extension, and no work done past the validity
	case <-lease.Done():
	case <-ctx.Done():
	}
	_ = lease.Release(ctx) // it says the lease was lost
	return ctx.Err()
}

// elect runs two candidates: the first leads, the second waits; the
// first resigns, and the second takes over at once; an observer sees the
// changes.
func elect(ctx context.Context, b *dsync.Backend, c config) error {
	opts := &leader.Options{TTL: c.electionTTL}
	a, err := leader.New(b, "scheduler", "worker-a", opts)
	if err != nil {
		return err
	}
	w, err := leader.New(b, "scheduler", "worker-b", opts)
	if err != nil {
		return err
	}
	octx, stopObserving := context.WithCancel(ctx)
	observed := a.Observe(octx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range observed {
		}
	})
	defer func() { stopObserving(); wg.Wait() }()

	la, err := a.Campaign(ctx)
	if err != nil {
		return err
	}
	type result struct {
		l   dsync.Leadership
		err error
	}
	won := make(chan result, 1)
	go func() { // returns when worker-b leads, or ctx ends
		l, err := w.Campaign(ctx)
		won <- result{l, err}
	}()
	waited := sleep(ctx, c.electionTTL/2) // worker-b reads the leader's TTL meanwhile
	if err := la.Resign(ctx); err != nil {
		return err
	}
	r := <-won
	if r.err != nil || waited != nil {
		return errors.Join(r.err, waited)
	}
	if err := sleep(ctx, 100*time.Millisecond); err != nil { // the observer sees worker-b
		return err
	}
	return r.l.Resign(ctx)
}

// dashboard prints every dsync series the Prometheus registry holds, the
// way a dashboard's panels would: counters and gauges by value,
// histograms by count and mean.
func dashboard(w io.Writer, reg *prometheus.Registry) error {
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\n== what a dashboard shows (Prometheus names; otel_scope labels left out)")
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "dsync_") {
			continue
		}
		fmt.Fprintf(w, "%s (%s)\n", f.GetName(), strings.ToLower(f.GetType().String()))
		var lines []string
		for _, m := range f.GetMetric() {
			labels := labelsOf(m)
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				mean := 0.0
				if h.GetSampleCount() > 0 {
					mean = h.GetSampleSum() / float64(h.GetSampleCount())
				}
				lines = append(lines, fmt.Sprintf("   %-70s count %4d  mean %s", labels, h.GetSampleCount(), human(f.GetName(), mean)))
			case dto.MetricType_COUNTER:
				lines = append(lines, fmt.Sprintf("   %-70s %g", labels, m.GetCounter().GetValue()))
			case dto.MetricType_GAUGE:
				lines = append(lines, fmt.Sprintf("   %-70s %g", labels, m.GetGauge().GetValue()))
			}
		}
		sort.Strings(lines)
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
	return nil
}

// labelsOf formats a series' labels, without the instrumentation scope's.
func labelsOf(m *dto.Metric) string {
	var out []string
	for _, l := range m.GetLabel() {
		if strings.HasPrefix(l.GetName(), "otel_scope") {
			continue
		}
		out = append(out, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(out)
	return "{" + strings.Join(out, " ") + "}"
}

// human formats a mean: a duration for seconds, a number otherwise.
func human(name string, v float64) string {
	if strings.HasSuffix(name, "_seconds") {
		return time.Duration(v * float64(time.Second)).Round(time.Microsecond).String()
	}
	return fmt.Sprintf("%.2f", v)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
