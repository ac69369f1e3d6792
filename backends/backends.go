// Package backends is the API of backend authors: the driver SPI that
// every dsync backend implements, the URL scheme registry that dsync.Open
// reads (Register, Scheme), and the helpers of a scheme's URL parsing.
// Applications do not import it; they reach a driver only through a
// *dsync.Backend and the lease layer above it.
//
// A driver is a thin adapter over one coordination service (a Redis server,
// N Redis masters, an etcd cluster, process memory). Every method makes
// exactly one attempt, honours its context and never retries or sleeps.
// It also returns within a bound of its own when the context has no
// deadline (the client's read and write timeouts, a per-node or request
// timeout), so that a server that stops answering never hangs a caller:
// the layer above sets no timer on a call. Retry with jitter, validity,
// drift, extension and its bound, and lost-hold detection are written once
// above this interface (internal/lease), for every primitive.
//
// The SPI has three shapes of failed acquisition attempt, and the layer
// above relies on the difference: plain contention is the bare
// ErrNotAcquired (err == ErrNotAcquired); a final error (ErrInvalid,
// ErrUnsupported, ErrClosed) ends the acquisition; anything else is an
// unknown outcome that the caller cleans up with Release. An unknown
// outcome means the backend could not decide (ErrUnavailable), unless it
// matches ErrNotAcquired and not ErrUnavailable: contention that the
// driver words itself (a Redlock vote split between contenders). The
// layer above reports the first as taken and the last as unavailable, so
// that callers tell them apart with errors.Is(err, ErrUnavailable).
// backendtest checks both on every driver, with real outages.
//
// This package imports nothing but the standard library and the
// OpenTelemetry metric API (for Telemetry), so that a driver can be
// written without pulling in the rest of the module.
package backends

import (
	"context"
	"strconv"
	"time"
)

// Driver is one connection to a coordination service. Implementations must be
// safe for concurrent use by multiple goroutines.
//
// Keys and tokens are opaque non-empty strings chosen by the layer above; a
// driver may map a key to its own storage layout (prefixes, hash tags) but
// must keep distinct keys independent.
type Driver interface {
	// Acquire makes one attempt to obtain a hold on req.Key for req.TTL.
	//
	// Plain contention (the key is held by someone else or, for req.Limit
	// > 1, every slot is taken) returns ErrNotAcquired itself, unwrapped,
	// and leaves nothing behind. An error matching ErrInvalid, ErrUnsupported
	// or ErrClosed is final: no retry can cure it, and nothing was applied.
	// Any other error, a wrapped ErrNotAcquired included, means the outcome
	// may be unknown: the hold may have been applied on the server after all,
	// and the caller releases (req.Key, req.Token) to be sure.
	//
	// Such an error says that the backend could not decide (no answer in
	// time, a broken connection, no quorum, a failover in progress), and
	// the caller reports the backend unavailable, unless it matches
	// ErrNotAcquired and not ErrUnavailable: refused, as contention, with
	// the driver's own detail. A driver whose decision needed servers that
	// did not answer marks its error with ErrUnavailable even when it wraps
	// ErrNotAcquired; a raw client error needs no mark.
	Acquire(ctx context.Context, req Request) (Grant, error)

	// Refresh resets the time to live of the hold identified by key and token
	// (the Request's) to ttl, measured from the moment the server applies it. It never
	// re-creates a hold that has expired: it returns ErrNotHeld when the hold
	// is gone or belongs to another token.
	Refresh(ctx context.Context, key, token string, ttl time.Duration) error

	// Release removes the hold identified by key and token, and only that
	// hold. It returns ErrNotHeld when the hold has expired or belongs to
	// another token; a newer hold on the same key is never touched. It also
	// removes whatever an Acquire of the same key and token whose outcome
	// was unknown may have left.
	Release(ctx context.Context, key, token string) error

	// Leave removes waiter's place in key's line (see Request.Waiter): the
	// Acquire that named it gave up. If a released lock was being kept for
	// waiter, it goes to the next waiter in line. A place left alone lapses
	// on its own, so Leave is a courtesy that saves the others that wait; a
	// driver that keeps no line (Capabilities.Order is NoOrder) returns nil
	// with no I/O.
	Leave(ctx context.Context, key, waiter string) error

	// Holder reports the current holder of key, or ErrNotHeld when nobody
	// holds it. For a semaphore key it reports the holder whose hold expires
	// last. For a lock held with a fencing token, HolderInfo.Fence is that
	// token (what the holder's Grant.Fence was), so that an observer learns
	// a leader's term; backendtest checks it.
	Holder(ctx context.Context, key string) (HolderInfo, error)

	// WatchReleases subscribes to release notices for key, so that waiters
	// retry at once instead of sleeping out their backoff (Redis pub/sub,
	// etcd watch). A notice is only a hint: a waiter still retries on its own
	// schedule, and a wake-up may be spurious or missed. The caller closes
	// the subscription. A driver without notices returns ErrUnsupported (and
	// says so in Capabilities.ReleaseNotices), so that a wrapping driver
	// forwards the method rather than losing it.
	WatchReleases(ctx context.Context, key string) (Subscription, error)

	// CheckTTL reports, with no I/O, whether the driver accepts ttl: an
	// *InvalidError naming the problem, or nil. Drivers whose rules go no
	// further than Capabilities return CheckTTL(ttl, d.Capabilities());
	// Redlock also needs two rounds of its per-node timeout to fit.
	CheckTTL(ttl time.Duration) error

	// Capabilities reports what the driver supports. It never changes over
	// the life of the driver and makes no I/O.
	Capabilities() Capabilities

	// Health reports whether the driver can serve acquisitions now, without
	// taking or touching any hold: one probe per server it talks to (a
	// PING, an etcd endpoint's status), in parallel, bounded by ctx. A
	// server that does not answer is reported in the Health (OK false),
	// not as an error; the error is ErrClosed after Close, or ctx's error
	// when ctx was done before any probe was sent. A driver with nothing
	// to probe (memory) reports OK. Wrapping drivers forward it.
	Health(ctx context.Context) (Health, error)

	// Close releases the driver's resources (connections, background
	// goroutines). Holds are left to expire on the server. Calls made after
	// Close return ErrClosed. Close is idempotent.
	Close() error
}

// Request describes one attempt to obtain a hold.
type Request struct {
	// Key names the lock or semaphore. Required.
	Key string
	// Token identifies this hold; it must be unique across all clients and
	// all attempts (the layer above draws it from crypto/rand). Required.
	Token string
	// Value is stored with the hold and returned by Holder (a leader's
	// candidate ID, for instance). Optional; at most MaxValueSize bytes.
	Value []byte
	// TTL is the time the hold lives on the server unless refreshed. It must
	// be positive and at least Capabilities.TTLResolution.
	TTL time.Duration
	// Limit is the number of concurrent holders the key admits: 1 for a
	// lock, the size for a semaphore. Zero means 1. Must not exceed
	// Capabilities.MaxLimit. A key has one limit at a time: a request whose
	// limit differs from that of the key's live holds fails with the error
	// of LimitMismatch (a semaphore of size 1 is the lock of the same key).
	Limit int
	// Fence asks for a fencing token. A driver without fencing ignores it;
	// a driver with fencing may skip the work of drawing one when false.
	Fence bool
	// Waiter names the blocking acquisition of a lock that this attempt
	// belongs to, the same for all its attempts that name one; empty for an
	// attempt outside any line (TryAcquire, or an Acquire's first attempt).
	// On a driver that serves waiters in order (Capabilities.Order), an
	// attempt refused with a Waiter puts the waiter in the key's line, or
	// keeps its place there, for TTL; a granted one takes it out; the line
	// lives no longer than its last place. A released lock is kept for the
	// live waiter whose name is smallest in byte order, the heir, whom the
	// release notice names (Notice.Heir), and every other attempt, those
	// without a Waiter included, is refused meanwhile, as Order says. The
	// layer above starts each name with the time of the Acquire call, so
	// that byte order is arrival order. Semaphores (Limit > 1) ignore it.
	// Optional; at most MaxWaiterSize bytes of [0-9a-z-].
	Waiter string
}

// MaxWaiterSize bounds Request.Waiter.
const MaxWaiterSize = 64

// Grant is the outcome of a successful Acquire.
type Grant struct {
	// Fence is the hold's fencing token: strictly greater than the token of
	// every earlier hold on the same key, as far as the backend can promise
	// (see each driver's documentation). Zero when the driver has no fencing
	// or the request did not ask for it.
	Fence uint64
	// TTL is the time to live the server actually applied. It differs from
	// the request when the backend rounds TTLs (etcd: whole seconds, with a
	// server minimum). Validity is computed from this value.
	TTL time.Duration
}

// HolderInfo describes the current holder of a key.
type HolderInfo struct {
	// Value is the value stored with the hold (Request.Value).
	Value []byte
	// TTL is the remaining time to live as the server reports it.
	TTL time.Duration
	// Fence is the hold's fencing token, as its Grant.Fence was, for a
	// lock acquired with fencing (Request.Fence). For a hold acquired
	// without, a driver reports zero or the token it would have drawn;
	// zero on a driver without fencing, and for a semaphore's holder where
	// the driver keeps no token per holder.
	Fence uint64
}

// MaxValueSize bounds Request.Value for every driver.
const MaxValueSize = 64 << 10

// MaxKeySize bounds Request.Key for every driver, in bytes.
const MaxKeySize = 1024

// Capabilities describes a driver. The layer above checks requests against it
// at construction time, so that a gap never surfaces later as a surprise.
type Capabilities struct {
	// Name is a short backend name for messages and metrics ("redis", "etcd").
	Name string
	// MaxLimit is the largest Request.Limit the driver accepts; 1 for a
	// driver that offers locks only.
	MaxLimit int
	// Fencing reports whether Grant.Fence carries fencing tokens.
	Fencing bool
	// TTLResolution is the granularity of TTLs on the server (1 ms for
	// Redis, 1 s for etcd). A TTL below it is rejected.
	TTLResolution time.Duration
	// MinTTL is the smallest TTL the server applies; shorter TTLs are raised
	// to it (and Grant.TTL says so). Zero means TTLResolution.
	MinTTL time.Duration
	// MaxTTL is the largest TTL the driver accepts (Redlock: the bound its
	// restart quarantine is built on). Zero means no bound.
	MaxTTL time.Duration
	// ReleaseNotices reports whether WatchReleases delivers notices.
	ReleaseNotices bool
	// Order is how the driver serves the waiters of a lock across clients
	// (Request.Waiter), and whether Leave removes one.
	Order Order
}

// Order is how a driver serves the waiters of a lock (Request.Waiter). It
// is one of two contracts, or none.
type Order int

const (
	// NoOrder: the driver keeps no line. Attempts race; whoever asks
	// first after a release takes the lock.
	NoOrder Order = iota
	// BoundedBarging: a released lock is kept for its heir (the first live
	// waiter in its line) for HandOver, and every other attempt is refused
	// meanwhile. An heir that lets the window lapse (slow, or dead) loses
	// that turn: the lock is then free for anybody, except that a waiter
	// in line never takes it while a live waiter is ahead of it (it is
	// kept for the first of those instead). Redis, Redlock and memory.
	BoundedBarging
	// StrictOrder: a released lock goes to the first live waiter in its
	// line, and to no other attempt as long as that waiter's place lives
	// (TTL after its last attempt). etcd, whose minimum lease TTL of
	// seconds rules out a short window.
	StrictOrder
)

// String names the order for messages.
func (o Order) String() string {
	switch o {
	case NoOrder:
		return "none"
	case BoundedBarging:
		return "bounded barging"
	case StrictOrder:
		return "strict"
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// HandOver is how long a driver with BoundedBarging keeps a released lock
// for its heir: many round trips and a notice's delivery, so that the woken
// heir takes it on a loaded machine too, and short enough that a dead heir
// costs the others little.
const HandOver = 200 * time.Millisecond

// Subscription delivers release notices for one key.
type Subscription interface {
	// C receives a notice after the key is released. Notices are
	// coalesced: any number of releases since the last receive yield one
	// notice, the latest.
	C() <-chan Notice
	// Close ends the subscription. It is idempotent.
	Close()
}

// Notice is a release notice.
type Notice struct {
	// Heir is the waiter (Request.Waiter) the released lock is kept for,
	// whose attempt alone can take it now; empty when the key is free for
	// any attempt (or the driver does not say).
	Heir string
}

// Deliver puts n on c, the buffered(1) channel of a Subscription, in place
// of a notice not received yet, so that notices coalesce into the latest
// as Subscription.C promises. It never blocks; of concurrent senders', the
// notice left is one of theirs.
func Deliver(c chan Notice, n Notice) {
	for {
		select {
		case c <- n:
			return
		default:
		}
		select {
		case <-c:
		default:
		}
	}
}

// Health is a driver's report on whether it can serve now.
type Health struct {
	// OK reports whether an acquisition could succeed now as far as the
	// servers go: the server answers (Redis), a member answers and knows
	// a leader (etcd), a quorum of nodes answer and vote (Redlock).
	OK bool
	// Reason says why not, in a few words, when OK is false.
	Reason string
	// Degraded says, in a few words, why the backend serves but tolerates
	// fewer failures than it should (a Redlock of fewer than 3 nodes,
	// which one node down stops), whatever OK says; empty otherwise.
	Degraded string
	// Nodes has one entry per server or member the driver talks to, in
	// the driver's order.
	Nodes []NodeHealth
}

// NodeHealth is one server's part of a Health report.
type NodeHealth struct {
	// Addr is the server's host:port (never credentials), or a name for a
	// driver without servers ("memory").
	Addr string
	// Reachable reports whether the server answered the probe.
	Reachable bool
	// Latency is the probe's round trip, when Reachable.
	Latency time.Duration
	// QuarantinedUntil is, for a Redlock node restarted less than MaxTTL
	// ago, the local time at which its vote counts again; zero otherwise.
	QuarantinedUntil time.Time
	// Durable reports, for a Redlock node, that its server persists every
	// write before answering (AOF on, appendfsync always) as far as the
	// driver read it, so that a restart of it the driver sees is not
	// quarantined (see docs/redlock.md).
	Durable bool
	// Detail is what else the probe learned ("leader", "follower"), or
	// empty.
	Detail string
	// Err is why the server did not answer, when not Reachable.
	Err error
}
