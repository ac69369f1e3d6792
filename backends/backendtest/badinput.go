package backendtest

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// The bad-input table. Each row prepares a call on a backend whose driver
// is spied on (spy.go) and makes it; the row then asserts the sentinels
// the call's error matches, that no call reached the driver where none
// should (such a call must also return at once), that the call returned
// within its bound, and that nothing was left behind: the row's key is
// free for a fresh TryAcquire on another backend afterwards. What each
// backend accepts (TTLs, sizes) is read from its Capabilities and
// CheckTTL, not written per backend.

// atOnce bounds a call that makes no I/O.
const atOnce = 250 * time.Millisecond

// silentDeadline and silentRelease are the caller's deadline and the
// release timeout of the rows against a server that does not answer;
// silentSlack is the scheduling allowance on top of their bound.
const (
	silentDeadline = 300 * time.Millisecond
	silentRelease  = 200 * time.Millisecond
	silentSlack    = 300 * time.Millisecond
)

type badRow struct {
	name string
	// prepare sets the row up (it may make I/O, through r.b or not) and
	// returns the call under test.
	prepare func(t *testing.T, r *rowEnv) func() error
	// want lists the sentinels the call's error must match; none: it
	// must succeed.
	want []error
	// field, when set, is the Field of the *InvalidError it returns.
	field string
	// io: the call under test may reach the driver. Without it, no call
	// may, and it must return within atOnce.
	io bool
	// within, when set, bounds the call under test.
	within time.Duration
}

// rowEnv is what a row works on.
type rowEnv struct {
	ctx  context.Context
	b    *dsync.Backend // over spy
	spy  *spyDriver
	key  string // the row's name, free at the start; rows may change it
	caps backends.Capabilities
	// after runs once the call has been judged and the link is up again:
	// the clean-up of holds a row leaves on purpose (Close leaves holds
	// to expire).
	after []func()
}

// done returns a context that has ended: cancelled, or past its deadline
// when deadline is set.
func done(ctx context.Context, deadline bool) context.Context {
	if deadline {
		c, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		cancel()
		return c
	}
	c, cancel := context.WithCancel(ctx)
	cancel()
	return c
}

// pad returns key lengthened to exactly n bytes.
func pad(key string, n int) string { return key + strings.Repeat("n", n-len(key)) }

// leaveHold has r release, through a driver of its own after the row,
// the hold a row leaves on purpose.
func (s *suite) leaveHold(t *testing.T, r *rowEnv, key, token string) {
	r.after = append(r.after, func() {
		if err := lease.Driver(s.backend(t)).Release(r.ctx, key, token); err != nil {
			t.Errorf("releasing the hold the row left: %v", err)
		}
	})
}

func (s *suite) testBadInput(t *testing.T) {
	b := s.backend(t)
	for _, row := range s.badRows(b) {
		t.Run(row.name, func(t *testing.T) { s.runBadRow(t, row) })
	}
	t.Run("driver", s.testDriverBadInput)
}

func (s *suite) runBadRow(t *testing.T, row badRow) {
	ctx := testutil.Context(t)
	b, sp := s.spyOn(t)
	r := &rowEnv{ctx: ctx, b: b, spy: sp, key: testutil.UniqueKey(t), caps: lease.Driver(b).Capabilities()}
	call := row.prepare(t, r)
	calls := sp.calls.Load()
	start := time.Now()
	err := call()
	took := time.Since(start)
	sp.link.Store(linkUp)

	if len(row.want) == 0 && err != nil {
		t.Errorf("error %v, want none", err)
	}
	if len(row.want) > 0 && err == nil {
		t.Errorf("no error, want one matching %v", row.want)
	}
	for _, w := range row.want {
		if err != nil && !errors.Is(err, w) {
			t.Errorf("error %v, want it to match %v", err, w)
		}
	}
	var ie *dsync.InvalidError
	if row.field != "" && (!errors.As(err, &ie) || ie.Field != row.field) {
		t.Errorf("error %v, want an *InvalidError on %q", err, row.field)
	}
	if !row.io {
		if n := sp.calls.Load() - calls; n != 0 {
			t.Errorf("%d calls reached the driver, want none", n)
		}
		if took > atOnce {
			t.Errorf("returned after %v, want at once (it makes no I/O)", took)
		}
	}
	if row.within > 0 && took > row.within {
		t.Errorf("returned after %v, want within %v", took, row.within)
	}
	for _, f := range r.after {
		f()
	}
	ls, err := newLocker(t, s.backend(t), r.key, nil).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the row left its key %q held: %v", r.key, err)
	}
	_ = ls.Release(ctx)
}

// badRows builds the table for b's capabilities.
func (s *suite) badRows(b *dsync.Backend) []badRow {
	caps := lease.Driver(b).Capabilities()
	inv := []error{dsync.ErrInvalid}
	notAcq := func(cause error) []error { return []error{dsync.ErrNotAcquired, cause} }
	tooLong := strings.Repeat("n", backends.MaxKeySize+1)

	// A lock made by New with opts, or the error New returned.
	lockNew := func(name func(r *rowEnv) string, opts *locker.Options) func(*testing.T, *rowEnv) func() error {
		return func(_ *testing.T, r *rowEnv) func() error {
			return func() error { _, err := locker.New(r.b, name(r), opts); return err }
		}
	}
	named := func(n string) func(*rowEnv) string { return func(*rowEnv) string { return n } }
	suffixed := func(sfx string) func(*rowEnv) string { return func(r *rowEnv) string { return r.key + sfx } }
	rows := []badRow{
		{name: "lock nil backend", field: "backend", want: inv, prepare: func(*testing.T, *rowEnv) func() error {
			return func() error { _, err := locker.New(nil, "k", nil); return err }
		}},
		{name: "lock empty name", field: "key", want: inv, prepare: lockNew(named(""), nil)},
		{name: "lock name with NUL", field: "key", want: inv, prepare: lockNew(suffixed("\x00"), nil)},
		{name: "lock name not UTF-8", field: "key", want: inv, prepare: lockNew(suffixed("\xff"), nil)},
		{name: "lock name over the limit", field: "key", want: inv, prepare: lockNew(named(tooLong), nil)},
		{name: "lock value over the limit", field: "value", want: inv, prepare: lockNew(suffixed(""), &locker.Options{Value: make([]byte, backends.MaxValueSize+1)})},
		{name: "lock ttl eaten by drift", field: "ttl", want: inv, prepare: lockNew(suffixed(""), &locker.Options{TTL: 2 * time.Second, DriftMin: 3 * time.Second})},
		{name: "lock extend interval over validity", field: "extend interval", want: inv, prepare: lockNew(suffixed(""), &locker.Options{TTL: 2 * time.Second, ExtendInterval: 2 * time.Second})},
		{name: "lock negative max extensions", field: "max extensions", want: inv, prepare: lockNew(suffixed(""), &locker.Options{MaxExtensions: -1})},
		{name: "lock max hold below ttl", field: "max hold", want: inv, prepare: lockNew(suffixed(""), &locker.Options{TTL: 10 * time.Second, MaxHold: time.Second})},
		{name: "lock name at the limit", io: true, prepare: func(t *testing.T, r *rowEnv) func() error {
			r.key = pad(r.key, backends.MaxKeySize)
			return func() error { return s.cycle(t, r, &locker.Options{Value: []byte("v")}, "v") }
		}},
		{name: "lock value at the limit", io: true, prepare: func(t *testing.T, r *rowEnv) func() error {
			v := strings.Repeat("v", backends.MaxValueSize)
			return func() error { return s.cycle(t, r, &locker.Options{Value: []byte(v)}, v) }
		}},
	}
	rows = append(rows, s.ttlRows(b)...)
	rows = append(rows, s.semRows(caps)...)
	rows = append(rows, s.electionRows()...)

	// Releases and extensions that have nothing to act on send nothing.
	rows = append(rows,
		badRow{name: "double release", want: []error{dsync.ErrNotHeld}, prepare: func(t *testing.T, r *rowEnv) func() error {
			ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, nil))
			if err := ls.Release(r.ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := ls.Err(); !errors.Is(err, dsync.ErrReleased) {
				t.Errorf("Err after Release: %v, want ErrReleased", err)
			}
			select {
			case <-ls.Done():
			default:
				t.Error("Done not closed after Release")
			}
			return func() error { return ls.Release(r.ctx) }
		}},
		badRow{name: "extend after release", want: []error{dsync.ErrNotHeld}, prepare: func(t *testing.T, r *rowEnv) func() error {
			ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, nil))
			if err := ls.Release(r.ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return func() error { return ls.Extend(r.ctx) }
		}},
	)

	// A context that has ended: nothing is sent, the error matches the
	// context's too.
	for _, dl := range []bool{false, true} {
		what, cause := "cancelled", error(context.Canceled)
		if dl {
			what, cause = "past its deadline", context.DeadlineExceeded
		}
		size := min(2, max(caps.MaxLimit, 1))
		rows = append(rows,
			badRow{name: "TryAcquire with a context " + what, want: notAcq(cause), prepare: func(t *testing.T, r *rowEnv) func() error {
				l := newLocker(t, r.b, r.key, nil)
				return func() error { _, err := l.TryAcquire(done(r.ctx, dl)); return err }
			}},
			badRow{name: "Acquire with a context " + what, want: notAcq(cause), prepare: func(t *testing.T, r *rowEnv) func() error {
				l := newLocker(t, r.b, r.key, nil)
				return func() error { _, err := l.Acquire(done(r.ctx, dl)); return err }
			}},
			badRow{name: "semaphore TryAcquire with a context " + what, want: notAcq(cause), prepare: func(t *testing.T, r *rowEnv) func() error {
				sem := newSemaphore(t, r.b, r.key, size, nil)
				return func() error { _, err := sem.TryAcquire(done(r.ctx, dl)); return err }
			}},
			badRow{name: "semaphore Acquire with a context " + what, want: notAcq(cause), prepare: func(t *testing.T, r *rowEnv) func() error {
				sem := newSemaphore(t, r.b, r.key, size, nil)
				return func() error { _, err := sem.Acquire(done(r.ctx, dl)); return err }
			}},
			badRow{name: "Campaign with a context " + what, want: notAcq(cause), prepare: func(t *testing.T, r *rowEnv) func() error {
				e := newElection(t, r.b, r.key, "a", &leader.Options{TTL: s.electionTTL()})
				return func() error { _, err := e.Campaign(done(r.ctx, dl)); return err }
			}},
			// Release on a done context still releases, on a fresh
			// context bounded by the release timeout.
			badRow{name: "Release with a context " + what, io: true, prepare: func(t *testing.T, r *rowEnv) func() error {
				ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, nil))
				return func() error { return ls.Release(done(r.ctx, dl)) }
			}},
		)
	}

	rows = append(rows, s.closedRows(caps)...)
	rows = append(rows, s.silentRows()...)
	return rows
}

// cycle acquires r.key with opts, checks that Holder reports value, and
// releases it.
func (s *suite) cycle(t *testing.T, r *rowEnv, opts *locker.Options, value string) error {
	l, err := locker.New(r.b, r.key, opts)
	if err != nil {
		return err
	}
	ls, err := l.TryAcquire(r.ctx)
	if err != nil {
		return err
	}
	if h, err := l.Holder(r.ctx); err != nil || string(h.Value) != value {
		t.Errorf("Holder: %d bytes of value, %v; want the %d bytes stored", len(h.Value), err, len(value))
	}
	return ls.Release(r.ctx)
}

// ttlRows: whether a TTL is accepted is the driver's CheckTTL's answer (a
// zero TTL meaning the default); an accepted one is granted as the
// capabilities say: raised to MinTTL, within one TTLResolution of the
// request.
func (s *suite) ttlRows(b *dsync.Backend) []badRow {
	d := lease.Driver(b)
	caps := d.Capabilities()
	res := max(caps.TTLResolution, time.Nanosecond)
	base := max(s.h.ShortTTL, caps.MinTTL).Truncate(res)
	ttls := []struct {
		name string
		ttl  time.Duration
	}{
		{"negative", -time.Second},
		{"zero: the default", 0},
		{"below the resolution", res - 1},
		{"not a multiple of the resolution", base + res/2},
	}
	if caps.MinTTL > res {
		ttls = append(ttls, struct {
			name string
			ttl  time.Duration
		}{"below the server's minimum", caps.MinTTL - res})
	}
	if caps.MaxTTL > 0 {
		ttls = append(ttls, struct {
			name string
			ttl  time.Duration
		}{"above the maximum", caps.MaxTTL + res})
	}
	var rows []badRow
	for _, c := range ttls {
		want := cmp.Or(c.ttl, b.Defaults().TTL, locker.DefaultTTL)
		row := badRow{name: "lock ttl " + c.name, io: true}
		if c.ttl < 0 || d.CheckTTL(want) != nil {
			row.io, row.want, row.field = false, []error{dsync.ErrInvalid}, "ttl"
		}
		row.prepare = func(t *testing.T, r *rowEnv) func() error {
			return func() error {
				l, err := locker.New(r.b, r.key, &locker.Options{TTL: c.ttl})
				if err != nil {
					return err
				}
				if l.TTL() != want {
					t.Errorf("locker TTL %v, want %v", l.TTL(), want)
				}
				ls, err := l.TryAcquire(r.ctx)
				if err != nil {
					return err
				}
				granted := ls.(interface{ TTL() time.Duration }).TTL()
				if exp := max(want, caps.MinTTL); granted < caps.MinTTL || granted <= exp-res || granted >= exp+res {
					t.Errorf("granted TTL %v for %v: want it at least MinTTL %v and within the resolution %v of %v", granted, want, caps.MinTTL, res, exp)
				}
				return ls.Release(r.ctx)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// semRows: sizes out of range, and names, as the capabilities say.
func (s *suite) semRows(caps backends.Capabilities) []badRow {
	semNew := func(name func(*rowEnv) string, size int) func(*testing.T, *rowEnv) func() error {
		return func(_ *testing.T, r *rowEnv) func() error {
			return func() error { _, err := semaphore.New(r.b, name(r), size, nil); return err }
		}
	}
	key := func(r *rowEnv) string { return r.key }
	overMax := badRow{name: "semaphore size over the maximum", want: []error{dsync.ErrInvalid}, field: "size", prepare: semNew(key, caps.MaxLimit+1)}
	if caps.MaxLimit <= 1 {
		overMax.want, overMax.field = []error{dsync.ErrUnsupported}, ""
	}
	rows := []badRow{
		{name: "semaphore size 0", want: []error{dsync.ErrInvalid}, field: "size", prepare: semNew(key, 0)},
		{name: "semaphore size negative", want: []error{dsync.ErrInvalid}, field: "size", prepare: semNew(key, -1)},
		overMax,
		{name: "semaphore empty name", want: []error{dsync.ErrInvalid}, field: "key", prepare: semNew(func(*rowEnv) string { return "" }, 2)},
		{name: "semaphore name over the limit", want: []error{dsync.ErrInvalid}, field: "key", prepare: semNew(func(*rowEnv) string { return strings.Repeat("n", backends.MaxKeySize+1) }, 2)},
		{name: "semaphore name with NUL", want: []error{dsync.ErrInvalid}, field: "key", prepare: semNew(func(r *rowEnv) string { return r.key + "\x00" }, 2)},
	}
	if caps.MaxLimit > 1 {
		permit := func(size int, r *rowEnv) func() error {
			return func() error {
				sem, err := semaphore.New(r.b, r.key, size, nil)
				if err != nil {
					return err
				}
				p, err := sem.TryAcquire(r.ctx)
				if err != nil {
					return err
				}
				return p.Release(r.ctx)
			}
		}
		rows = append(rows,
			badRow{name: "semaphore size at the maximum", io: true, prepare: func(_ *testing.T, r *rowEnv) func() error {
				return permit(caps.MaxLimit, r)
			}},
			badRow{name: "semaphore name at the limit", io: true, prepare: func(_ *testing.T, r *rowEnv) func() error {
				r.key = pad(r.key, backends.MaxKeySize)
				return permit(2, r)
			}},
		)
	}
	return rows
}

// electionRows: names as a lock's, candidate IDs as values that must be
// text.
func (s *suite) electionRows() []badRow {
	elect := func(name func(*rowEnv) string, id string) func(*testing.T, *rowEnv) func() error {
		return func(_ *testing.T, r *rowEnv) func() error {
			return func() error { _, err := leader.New(r.b, name(r), id, nil); return err }
		}
	}
	key := func(r *rowEnv) string { return r.key }
	inv := []error{dsync.ErrInvalid}
	term := func(t *testing.T, r *rowEnv, id string) func() error {
		return func() error {
			e, err := leader.New(r.b, r.key, id, &leader.Options{TTL: s.electionTTL()})
			if err != nil {
				return err
			}
			l, err := e.Campaign(r.ctx)
			if err != nil {
				return err
			}
			if got, err := e.Leader(r.ctx); err != nil || got.ID != id || got.Term != l.Term() {
				t.Errorf("Leader: %d bytes in term %d, %v; want the %d bytes of the candidate ID in term %d", len(got.ID), got.Term, err, len(id), l.Term())
			}
			return l.Resign(r.ctx)
		}
	}
	return []badRow{
		{name: "election empty candidate ID", want: inv, field: "candidate id", prepare: elect(key, "")},
		{name: "election candidate ID over the limit", want: inv, field: "candidate id", prepare: elect(key, strings.Repeat("i", backends.MaxValueSize+1))},
		{name: "election candidate ID with NUL", want: inv, field: "candidate id", prepare: elect(key, "a\x00b")},
		{name: "election candidate ID not UTF-8", want: inv, field: "candidate id", prepare: elect(key, "a\xffb")},
		{name: "election empty name", want: inv, field: "name", prepare: elect(func(*rowEnv) string { return "" }, "a")},
		{name: "election name over the limit", want: inv, field: "name", prepare: elect(func(*rowEnv) string { return strings.Repeat("n", backends.MaxKeySize+1) }, "a")},
		{name: "election name with NUL", want: inv, field: "name", prepare: elect(func(r *rowEnv) string { return r.key + "\x00" }, "a")},
		{name: "election candidate ID at the limit", io: true, prepare: func(t *testing.T, r *rowEnv) func() error {
			return term(t, r, strings.Repeat("i", backends.MaxValueSize))
		}},
		{name: "election name at the limit", io: true, prepare: func(t *testing.T, r *rowEnv) func() error {
			r.key = pad(r.key, backends.MaxKeySize)
			return term(t, r, "a")
		}},
	}
}

// closedRows: every call on a closed backend fails at once with
// ErrClosed; the holds it had are left to expire (the row releases them
// through another backend).
func (s *suite) closedRows(caps backends.Capabilities) []badRow {
	closed := func(name string, call func(t *testing.T, r *rowEnv) func() error) badRow {
		return badRow{name: name + " after Close", want: []error{dsync.ErrClosed}, io: true, within: atOnce, prepare: func(t *testing.T, r *rowEnv) func() error {
			f := call(t, r)
			if err := r.b.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := r.b.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			return f
		}}
	}
	held := func(t *testing.T, r *rowEnv) dsync.Lease {
		ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, nil))
		s.leaveHold(t, r, r.key, holdToken(t, ls))
		return ls
	}
	return []badRow{
		closed("TryAcquire", func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, nil)
			return func() error { _, err := l.TryAcquire(r.ctx); return err }
		}),
		closed("Acquire", func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, nil)
			return func() error { _, err := l.Acquire(r.ctx); return err }
		}),
		closed("Extend", func(t *testing.T, r *rowEnv) func() error {
			ls := held(t, r)
			return func() error { return ls.Extend(r.ctx) }
		}),
		closed("Release", func(t *testing.T, r *rowEnv) func() error {
			ls := held(t, r)
			return func() error { return ls.Release(r.ctx) }
		}),
		closed("Holder", func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, nil)
			return func() error { _, err := l.Holder(r.ctx); return err }
		}),
		closed("semaphore Acquire", func(t *testing.T, r *rowEnv) func() error {
			sem := newSemaphore(t, r.b, r.key, min(2, max(caps.MaxLimit, 1)), nil)
			return func() error { _, err := sem.Acquire(r.ctx); return err }
		}),
		closed("Campaign", func(t *testing.T, r *rowEnv) func() error {
			e := newElection(t, r.b, r.key, "a", &leader.Options{TTL: s.electionTTL()})
			return func() error { _, err := e.Campaign(r.ctx); return err }
		}),
	}
}

// silentRows: against a server that does not answer, a call returns by
// the caller's deadline plus the clean-up's bound (the release timeout), or
// by the driver's own request timeout when the caller's context has no
// deadline, with an error that matches a sentinel and the context's error.
func (s *suite) silentRows() []badRow {
	opts := &locker.Options{ReleaseTimeout: silentRelease}
	deadline := func(t *testing.T, r *rowEnv) context.Context {
		ctx, cancel := context.WithTimeout(r.ctx, silentDeadline)
		t.Cleanup(cancel)
		return ctx
	}
	acquireBound := silentDeadline + silentRelease + silentSlack
	notAcq := []error{dsync.ErrNotAcquired, dsync.ErrUnavailable, context.DeadlineExceeded}
	return []badRow{
		{name: "TryAcquire, server silent", want: notAcq, io: true, within: acquireBound, prepare: func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, opts)
			r.spy.link.Store(linkSilent)
			return func() error { _, err := l.TryAcquire(deadline(t, r)); return err }
		}},
		{name: "Acquire, server silent", want: notAcq, io: true, within: acquireBound, prepare: func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, opts)
			r.spy.link.Store(linkSilent)
			return func() error { _, err := l.Acquire(deadline(t, r)); return err }
		}},
		{name: "Campaign, server silent", want: notAcq, io: true, within: acquireBound, prepare: func(t *testing.T, r *rowEnv) func() error {
			e := newElection(t, r.b, r.key, "a", &leader.Options{TTL: s.electionTTL(), ReleaseTimeout: silentRelease})
			r.spy.link.Store(linkSilent)
			return func() error { _, err := e.Campaign(deadline(t, r)); return err }
		}},
		{name: "Extend, server silent", want: []error{dsync.ErrUnavailable, context.DeadlineExceeded}, io: true, within: silentDeadline + silentSlack, prepare: func(t *testing.T, r *rowEnv) func() error {
			ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, opts))
			s.leaveHold(t, r, r.key, holdToken(t, ls)) // valid until it expires
			r.spy.link.Store(linkSilent)
			return func() error { return ls.Extend(deadline(t, r)) }
		}},
		{name: "Holder, server silent", want: []error{dsync.ErrUnavailable, context.DeadlineExceeded}, io: true, within: silentDeadline + silentSlack, prepare: func(t *testing.T, r *rowEnv) func() error {
			l := newLocker(t, r.b, r.key, opts)
			r.spy.link.Store(linkSilent)
			return func() error { _, err := l.Holder(deadline(t, r)); return err }
		}},
		{name: "Leader, server silent", want: []error{dsync.ErrUnavailable, context.DeadlineExceeded}, io: true, within: silentDeadline + silentSlack, prepare: func(t *testing.T, r *rowEnv) func() error {
			e := newElection(t, r.b, r.key, "a", &leader.Options{TTL: s.electionTTL()})
			r.spy.link.Store(linkSilent)
			return func() error { _, err := e.Leader(deadline(t, r)); return err }
		}},
		// The reply of a release is lost: the lease has ended here
		// (ErrNotHeld), and the hold, left on the server, expires.
		{name: "Release, server silent", want: []error{dsync.ErrNotHeld, context.DeadlineExceeded}, io: true, within: spyRequestTimeout + silentSlack, prepare: func(t *testing.T, r *rowEnv) func() error {
			ls := testutil.MustAcquire(t, r.ctx, newLocker(t, r.b, r.key, opts))
			s.leaveHold(t, r, r.key, holdToken(t, ls))
			r.spy.link.Store(linkSilent)
			return func() error { return ls.Release(r.ctx) }
		}},
	}
}

// testDriverBadInput: the driver itself refuses bad requests before any
// I/O, with the same errors on every backend (backends.CheckRequest).
func (s *suite) testDriverBadInput(t *testing.T) {
	ctx := testutil.Context(t)
	d := lease.Driver(s.backend(t))
	caps := d.Capabilities()
	ttl := s.driverTTL(d)
	overLimit := error(dsync.ErrInvalid)
	if caps.MaxLimit <= 1 {
		overLimit = dsync.ErrUnsupported
	}
	for _, tc := range []struct {
		name string
		req  backends.Request
		want error
	}{
		{"empty key", backends.Request{Token: "t", TTL: ttl}, dsync.ErrInvalid},
		{"key over the limit", backends.Request{Key: strings.Repeat("k", backends.MaxKeySize+1), Token: "t", TTL: ttl}, dsync.ErrInvalid},
		{"key with NUL", backends.Request{Key: "k\x00", Token: "t", TTL: ttl}, dsync.ErrInvalid},
		{"key not UTF-8", backends.Request{Key: "k\xff", Token: "t", TTL: ttl}, dsync.ErrInvalid},
		{"empty token", backends.Request{Key: "k", TTL: ttl}, dsync.ErrInvalid},
		{"zero ttl", backends.Request{Key: "k", Token: "t"}, dsync.ErrInvalid},
		{"negative ttl", backends.Request{Key: "k", Token: "t", TTL: -ttl}, dsync.ErrInvalid},
		{"negative limit", backends.Request{Key: "k", Token: "t", TTL: ttl, Limit: -1}, dsync.ErrInvalid},
		{"limit over the maximum", backends.Request{Key: "k", Token: "t", TTL: ttl, Limit: caps.MaxLimit + 1}, overLimit},
		{"value too large", backends.Request{Key: "k", Token: "t", TTL: ttl, Value: make([]byte, backends.MaxValueSize+1)}, dsync.ErrInvalid},
	} {
		t.Run("Acquire "+tc.name, func(t *testing.T) {
			if _, err := d.Acquire(ctx, tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("driver Acquire: %v, want %v", err, tc.want)
			}
		})
	}
	for name, err := range map[string]error{
		"refresh empty key":   d.Refresh(ctx, "", "t", ttl),
		"refresh zero ttl":    d.Refresh(ctx, "k", "t", 0),
		"release empty key":   d.Release(ctx, "", "t"),
		"release empty token": d.Release(ctx, "k", ""),
	} {
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("driver %s: %v, want ErrInvalid", name, err)
		}
	}
}
