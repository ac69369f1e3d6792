// Package deadline bounds calls by a timeout without arming a timer for
// each call.
//
// context.WithTimeout arms a runtime timer for every call and stops it on
// cancel. On a loopback Redis lock cycle (about 55 µs with client and
// server on one CPU) the two that a cycle needs, one for the acquire and
// one for the release, cost about 4% of the cycle. A Clock instead lets the
// calls that begin within a sixteenth of the timeout of each other share
// one context, whose deadline is the earliest of theirs: every call is
// bounded by at most its timeout and by no less than 15/16 of it.
//
// Calls share when the caller's context can never be cancelled
// (context.Background, context.WithoutCancel, and values on top of them),
// and when they come again and again from the same cancellable context (a
// worker's long-lived one): the shared context then derives from it. A
// caller's context seen for the first time gets a context of its own, as
// with context.WithTimeout, unless its own deadline comes first.
package deadline

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// A Clock bounds calls by a timeout, sharing one context among the calls
// that ask for the same timeout at about the same time. The contexts it
// shares among callers whose context cannot be cancelled derive from its
// parent, context.Background for the zero Clock, which is ready to use. A
// Clock is safe for concurrent use and must not be copied after first use.
// It holds no goroutine: each context it shares is released by its own
// timer at its deadline (or when its parent ends), so at most about 17 per
// timeout in use are alive at a time.
type Clock struct {
	parent context.Context // nil: context.Background
	once   sync.Once
	base   time.Time // the first use, with its monotonic reading: deadlines ignore wall-clock steps
	// current holds, by slotKey, an *atomic.Pointer[span] to the context
	// shared last; for up to maxTimeouts keys, beyond which contexts are
	// made per call.
	current  sync.Map
	timeouts atomic.Int32
}

// maxTimeouts bounds a Clock's cache: a program uses a handful of
// timeouts (one per configuration), not one per call.
const maxTimeouts = 32

// slotKey names a cache entry: the contexts of one timeout derived from
// the clock's parent, or from the caller's context.
type slotKey struct {
	timeout  time.Duration
	ofCaller bool
}

// NewClock returns a Clock whose contexts derive from parent, so that they
// all end when it does.
func NewClock(parent context.Context) *Clock { return &Clock{parent: parent} }

// span is the context derived from parent shared by the calls of one
// timeout whose deadline rounds down to base + k*(timeout/16). A span with
// no ctx records the first call seen from a caller's context.
type span struct {
	k      int64
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc // never called: the timer at the deadline releases the context
}

// Within returns ctx bounded by timeout, and the function that releases its
// resources, to be called when the bounded call returns. It keeps
// context.WithTimeout's contract: the context returned is done when ctx is,
// or when the bound passes, and it carries ctx's values.
//
//   - If ctx's deadline comes within timeout, ctx itself is returned.
//   - If ctx can never be cancelled (its Done is nil), it is
//     Detached(ctx, timeout), which also ends if the clock's parent does.
//   - If the previous call of this timeout came from ctx too, the context
//     returned derives from ctx and is shared with the other calls of the
//     same timeout from ctx within timeout/16 of this one: its deadline is
//     at most timeout and more than timeout - timeout/16 away.
//   - Otherwise it is context.WithTimeout(ctx, timeout).
func (c *Clock) Within(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
		return ctx, noop
	}
	if timeout <= 0 {
		return context.WithTimeout(ctx, timeout)
	}
	if ctx.Done() == nil {
		return c.Detached(ctx, timeout), noop
	}
	if shared := c.sharedOf(ctx, timeout); shared != nil {
		return shared, noop
	}
	return context.WithTimeout(ctx, timeout)
}

// Detached returns a context that carries ctx's values but not its
// cancellation or deadline, and ends at a deadline at most timeout and
// more than timeout - timeout/16 from now, or when the clock's parent
// ends. It is shared with the calls of the same timeout made within
// timeout/16 of this one; nothing needs to be called when the call it
// bounds is done. A timeout <= 0 gives a context that has ended.
func (c *Clock) Detached(ctx context.Context, timeout time.Duration) context.Context {
	shared := c.shared(timeout)
	if ctx == context.Background() || ctx == context.TODO() {
		return shared
	}
	return valuesFrom{Context: shared, values: ctx}
}

// start records the clock's first use.
func (c *Clock) start() {
	c.once.Do(func() {
		c.base = time.Now()
		if c.parent == nil {
			c.parent = context.Background()
		}
	})
}

// shared returns the context, derived from the clock's parent, that ends
// within timeout and not before timeout - timeout/16 from now.
func (c *Clock) shared(timeout time.Duration) context.Context {
	timeout = max(timeout, 0)
	c.start()
	return c.share(c.slot(slotKey{timeout: timeout}), c.parent, timeout)
}

// sharedOf returns the context derived from caller that ends within timeout
// and not before timeout - timeout/16 from now, when the previous call of
// this timeout came from caller too; otherwise it records caller and
// returns nil. Contexts made from a caller seen once are left to
// context.WithTimeout, so that callers with a context per call (a
// request's) leave no context waiting for its deadline.
func (c *Clock) sharedOf(caller context.Context, timeout time.Duration) context.Context {
	if !reflect.TypeOf(caller).Comparable() {
		return nil
	}
	cur := c.slot(slotKey{timeout: timeout, ofCaller: true})
	if cur == nil {
		return nil
	}
	if s := cur.Load(); s == nil || s.parent != caller {
		cur.Store(&span{parent: caller})
		return nil
	}
	c.start()
	return c.share(cur, caller, timeout)
}

// share returns the context derived from parent that ends at the step of
// timeout due now, from the cache entry cur when it holds that one, else
// a new one, which it caches (cur may be nil: a full cache).
func (c *Clock) share(cur *atomic.Pointer[span], parent context.Context, timeout time.Duration) context.Context {
	q := max(timeout/16, 1)
	k := int64((time.Since(c.base) + timeout) / q)
	if cur != nil {
		if s := cur.Load(); s != nil && s.ctx != nil && s.k == k && s.parent == parent {
			return s.ctx
		}
	}
	ctx, cancel := context.WithDeadline(parent, c.base.Add(time.Duration(k)*q))
	s := &span{k: k, parent: parent, ctx: ctx, cancel: cancel}
	if cur != nil {
		cur.Store(s)
	}
	return ctx
}

// slot returns the cache entry for key, or nil when the cache is full.
func (c *Clock) slot(key slotKey) *atomic.Pointer[span] {
	if p, ok := c.current.Load(key); ok {
		return p.(*atomic.Pointer[span])
	}
	if c.timeouts.Add(1) > maxTimeouts {
		c.timeouts.Add(-1)
		return nil
	}
	p, loaded := c.current.LoadOrStore(key, new(atomic.Pointer[span]))
	if loaded {
		c.timeouts.Add(-1)
	}
	return p.(*atomic.Pointer[span])
}

func noop() {}

// valuesFrom is a shared deadline context that answers Value from the
// caller's context.
type valuesFrom struct {
	context.Context
	values context.Context
}

func (c valuesFrom) Value(key any) any { return c.values.Value(key) }
