package dsync

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/hook"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// The packages built over the driver SPI reach a Backend's driver,
// telemetry and per-backend state through these hooks, not through
// exported methods that would let application code past the lease layer.
func init() {
	hook.Driver = func(b any) backends.Driver { return b.(*Backend).driver }
	hook.Telemetry = func(b any) *telemetry.T { return b.(*Backend).tel }
	hook.State = func(b any, key any, create func() any) any { return b.(*Backend).stateOf(key, create) }
}

// Backend is an open connection to a coordination service, as returned by
// Open, OpenWith or a backend package's constructor (redis.New, for one),
// with the defaults its URL or options set. The locker, semaphore and
// leader packages take a *Backend. It is safe for concurrent use; Close it
// when done.
type Backend struct {
	driver    backends.Driver
	name      string
	defaults  Defaults
	telemetry Telemetry
	tel       *telemetry.T

	closeOnce sync.Once
	closeErr  error

	stateMu sync.Mutex
	state   map[any]any // protected by stateMu; see hook.State
}

// Defaults are the settings a backend's URL chose for the primitives built on
// it. A zero field leaves the primitive's own default in force; options
// passed to a primitive's constructor override these.
type Defaults struct {
	// TTL is the lease time to live (URL option ttl).
	TTL time.Duration
	// RetryMin and RetryMax bound the jittered exponential delay between
	// acquisition attempts (URL options retry_min, retry_max).
	RetryMin, RetryMax time.Duration
}

// Telemetry chooses where a backend's metrics, spans and log lines go
// (docs/observability.md lists them). The zero value uses the
// OpenTelemetry global providers, which record nothing until the
// application installs an SDK, and logs nothing.
type Telemetry struct {
	// MeterProvider makes the backend's instruments, under the scope
	// "github.com/dsync-dev/dsync". Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider starts a span for every Acquire, TryAcquire, Extend,
	// Release, Campaign and Resign. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Logger receives warnings (a lease lost, an extension that failed)
	// and notices (a leader change, a Redlock node quarantined or back).
	// Default nil: nothing is logged. No line carries a hold token or a
	// password.
	Logger *slog.Logger
	// KeyAttributes adds each key's name (lock, semaphore, election) to
	// the attributes of metrics and spans. Off by default: one series per
	// key can be many. Log lines always name the key.
	KeyAttributes bool
}

// BackendOptions configure OpenWith and NewBackend; each backend
// package's Options embed them. A nil *BackendOptions means defaults.
type BackendOptions struct {
	// Name describes the backend in messages; it must not contain secrets.
	// Default: the driver's Capabilities().Name (OpenWith: the URL, its
	// password and secret options redacted).
	Name string
	// Defaults for the primitives built on this backend. OpenWith uses
	// them where the URL sets nothing.
	Defaults Defaults
	// Telemetry chooses where metrics, spans and log lines go.
	Telemetry Telemetry
}

// NewBackend returns the portable Backend over a driver. It is the
// constructor that backend packages call (redis.New over the
// application's own client, for one), as gocloud's driver packages do;
// applications call Open or a backend package's New. The Backend owns the
// driver: Close closes it.
func NewBackend(d backends.Driver, opts *BackendOptions) (*Backend, error) {
	if d == nil {
		return nil, &InvalidError{Field: "driver", Reason: "nil"}
	}
	if opts == nil {
		opts = &BackendOptions{}
	}
	if err := opts.Defaults.validate(); err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = d.Capabilities().Name
	}
	tel, err := telemetry.New(d.Capabilities().Name, telemetry.Settings(opts.Telemetry))
	if err != nil && opts.Telemetry.Logger != nil {
		// An instrument the meter provider refused records nothing; the
		// others work.
		opts.Telemetry.Logger.Warn("dsync: telemetry: " + err.Error())
	}
	return &Backend{driver: d, name: name, defaults: opts.Defaults, telemetry: opts.Telemetry, tel: tel}, nil
}

func (d Defaults) validate() error {
	switch {
	case d.TTL < 0:
		return &InvalidError{Field: "ttl", Reason: d.TTL.String() + " is negative"}
	case d.RetryMin < 0:
		return &InvalidError{Field: "retry_min", Reason: d.RetryMin.String() + " is negative"}
	case d.RetryMax < 0:
		return &InvalidError{Field: "retry_max", Reason: d.RetryMax.String() + " is negative"}
	case d.RetryMin > 0 && d.RetryMax > 0 && d.RetryMax < d.RetryMin:
		return &InvalidError{Field: "retry_max", Reason: d.RetryMax.String() + " is below retry_min " + d.RetryMin.String()}
	}
	return nil
}

// stateOf is hook.State's implementation.
func (b *Backend) stateOf(key any, create func() any) any {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	v, ok := b.state[key]
	if !ok {
		if b.state == nil {
			b.state = make(map[any]any)
		}
		v = create()
		b.state[key] = v
	}
	return v
}

// Defaults returns the settings the backend's URL chose.
func (b *Backend) Defaults() Defaults { return b.defaults }

// Telemetry returns where the backend's telemetry goes.
func (b *Backend) Telemetry() Telemetry { return b.telemetry }

// Health is a backend's report on whether it can serve now (see
// Backend.Health): OK, the reason when not, and each server's state.
type Health = backends.Health

// NodeHealth is one server's part of a Health report.
type NodeHealth = backends.NodeHealth

// healthTimeout bounds Backend.Health when its ctx has no deadline.
const healthTimeout = 5 * time.Second

// Health reports whether b can serve now, without taking a lock: one probe
// of each server, in parallel (Redis: PING; Redlock: each node's PING and
// restart quarantine; etcd: each endpoint's status; memory: always OK),
// bounded by ctx, or by 5 seconds when ctx has no deadline. A
// server that does not answer is reported in the Health, not as an error;
// the error is ErrClosed after Close, or ctx's if it was done already.
func (b *Backend) Health(ctx context.Context) (Health, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, healthTimeout)
		defer cancel()
	}
	return b.driver.Health(ctx)
}

// String describes the backend; a URL's password and secret options are
// redacted.
func (b *Backend) String() string { return b.name }

// Close closes the driver, then what the packages built on b keep for it
// (local waiting lines, a leader's candidacies) and its telemetry. Leases
// still held are left to expire on the server; calls on them fail with
// ErrClosed. Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closeErr = b.driver.Close()
		b.stateMu.Lock()
		state := slices.Collect(maps.Values(b.state))
		b.stateMu.Unlock()
		for _, v := range state {
			if c, ok := v.(interface{ Close() }); ok {
				c.Close()
			}
		}
		b.tel.Close()
	})
	return b.closeErr
}
