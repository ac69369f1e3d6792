package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/retry"
)

// Defaults of Options.
const (
	// DefaultMaxRetryPeriod caps the default RetryPeriod (TTL/4).
	DefaultMaxRetryPeriod = time.Second
	// retryJitter spreads the followers' attempts within ±20% of
	// RetryPeriod, so that they do not poll in step.
	retryJitter = 0.2
)

// ErrDuplicateID is returned (wrapped) by Campaign when another live
// candidate uses the same candidate ID in the same election: Observe and
// Leader could not tell the two apart. The error also matches
// dsync.ErrNotAcquired; Run stops on it. It is dsync.ErrDuplicateID, here
// for convenience.
var ErrDuplicateID = dsync.ErrDuplicateID

// Options configure an Election. A nil *Options means defaults; a zero
// field means that field's default.
type Options struct {
	// TTL is the time the leader's lease lives on the backend unless
	// renewed: how long the others wait for a leader that died without
	// resigning. Default: the backend URL's ttl option, else
	// locker.DefaultTTL (10s).
	TTL time.Duration
	// RenewInterval is how often the leader renews its lease. Default
	// TTL/3; it must be below the TTL minus the drift allowance. A failed
	// renewal is retried every RenewInterval/4 until the lease's validity
	// runs out, when leadership is lost.
	RenewInterval time.Duration
	// RetryPeriod is how often a follower tries to take the lease; each
	// wait is drawn within ±20% of it, and a release notice from the
	// backend cuts it short. Default TTL/4, at most DefaultMaxRetryPeriod
	// (1s); it must be below the TTL.
	RetryPeriod time.Duration
	// Retry, if set, spaces out a follower's attempts instead of
	// RetryPeriod (which still sets the defaults derived from it).
	Retry retry.Policy
	// ObserveInterval is how often Observe reads the current leader (it
	// also reads it at once on a release notice); a term shorter than that
	// may go unseen. Default RetryPeriod.
	ObserveInterval time.Duration
	// DriftFactor, DriftMin and ReleaseTimeout are as in locker.Options,
	// with the same defaults.
	DriftFactor    float64
	DriftMin       time.Duration
	ReleaseTimeout time.Duration
}

// Observer reads who leads an election, without campaigning in it: Leader
// and Observe. It is safe for concurrent use.
type Observer struct {
	name            string
	cfg             *lease.Config
	observeInterval time.Duration
}

// Election is one candidate's view of an election: the candidate ID it
// campaigns with, on one name of one backend, and an Observer of it. It is
// safe for concurrent use, but a candidate leads at most once at a time: a
// second Campaign while the first is under way or its leadership lasts
// fails with ErrDuplicateID.
type Election struct {
	Observer
	id          string
	retryPeriod time.Duration
}

var _ dsync.LeaderElection = (*Election)(nil)

// New returns candidateID's view of the election name on b. The election
// lives on the backend key name (a lock of the same key is the same hold).
// It checks the options against each other and against the backend, with
// no I/O: a name that is not a valid key (see locker.New), a candidate ID
// that is empty, above backends.MaxValueSize or not text (a NUL byte,
// invalid UTF-8), or a bad option, is an *dsync.InvalidError naming it.
func New(b *dsync.Backend, name, candidateID string, opts *Options) (*Election, error) {
	switch {
	case candidateID == "":
		return nil, backends.Invalid("candidate id", "empty: each candidate needs an ID of its own, which Leader and Observe report (to observe without campaigning, use NewObserver)")
	case strings.IndexByte(candidateID, 0) >= 0 || !utf8.ValidString(candidateID):
		return nil, backends.Invalid("candidate id", "%q is not text (a NUL byte, or not valid UTF-8): Leader reports it as a string", candidateID)
	}
	cfg, o, err := newConfig(b, name, []byte(candidateID), opts)
	if err != nil {
		return nil, err
	}
	return &Election{
		Observer:    Observer{name: name, cfg: cfg, observeInterval: o.ObserveInterval},
		id:          candidateID,
		retryPeriod: o.RetryPeriod,
	}, nil
}

// NewObserver returns an observer of the election name on b, which needs no
// candidate ID: it reads the leader and never campaigns. Of opts, TTL (for
// the defaults), RetryPeriod and ObserveInterval matter; the options are
// checked as New checks them, with no I/O.
func NewObserver(b *dsync.Backend, name string, opts *Options) (*Observer, error) {
	cfg, o, err := newConfig(b, name, nil, opts)
	if err != nil {
		return nil, err
	}
	return &Observer{name: name, cfg: cfg, observeInterval: o.ObserveInterval}, nil
}

// newConfig checks opts for the election name on b, whose candidates store
// value, and returns the lease configuration and opts with every default
// filled in. It checks the options that are the election's own (the name,
// the candidate ID's size, the renew interval and the retry period) under
// their own names before lease.New checks the rest.
func newConfig(b *dsync.Backend, name string, value []byte, opts *Options) (*lease.Config, Options, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	switch {
	case o.RenewInterval < 0:
		return nil, o, backends.Invalid("renew interval", "%v is negative", o.RenewInterval)
	case o.RetryPeriod < 0:
		return nil, o, backends.Invalid("retry period", "%v is negative", o.RetryPeriod)
	case o.ObserveInterval < 0:
		return nil, o, backends.Invalid("observe interval", "%v is negative", o.ObserveInterval)
	case b == nil:
		return nil, o, backends.Invalid("backend", "nil")
	case len(value) > backends.MaxValueSize:
		return nil, o, backends.Invalid("candidate id", "%d bytes exceeds the maximum of %d", len(value), backends.MaxValueSize)
	}
	if err := backends.CheckKey(name); err != nil {
		var ie *dsync.InvalidError
		if errors.As(err, &ie) {
			return nil, o, backends.Invalid("name", "%s", ie.Reason)
		}
		return nil, o, err
	}
	lo := &lease.Options{
		TTL: o.TTL, Value: value, Retry: o.Retry,
		DriftFactor: o.DriftFactor, DriftMin: o.DriftMin,
		ReleaseTimeout: o.ReleaseTimeout,
		ExtendInterval: o.RenewInterval, AutoExtend: true,
		MaxHold: -1, // a leader leads for as long as it lives
	}
	// The checks against the TTL wait for one that leaves a validity;
	// lease.New reports a TTL that does not.
	r := lease.Resolve(b, lo)
	validity := r.TTL - r.Drift(r.TTL)
	if o.RetryPeriod == 0 {
		o.RetryPeriod = max(min(r.TTL/4, DefaultMaxRetryPeriod), time.Millisecond)
	}
	if validity > 0 {
		switch {
		case o.RenewInterval >= validity:
			return nil, o, backends.Invalid("renew interval", "%v must be below the validity %v (ttl minus drift)", o.RenewInterval, validity)
		case o.RetryPeriod >= r.TTL:
			return nil, o, backends.Invalid("retry period", "%v is not below the ttl %v", o.RetryPeriod, r.TTL)
		}
	}
	if o.ObserveInterval == 0 {
		o.ObserveInterval = o.RetryPeriod
	}
	if lo.Retry == nil {
		var err error
		if lo.Retry, err = retry.NewConstant(&retry.ConstantOptions{Delay: o.RetryPeriod, Jitter: retryJitter}); err != nil {
			return nil, o, backends.Invalid("retry period", "%v", err)
		}
	}
	cfg, err := lease.New(b, lease.Election, name, 1, lo)
	if err != nil {
		return nil, o, err
	}
	return cfg, o, nil
}

// Name is the election's name, the backend key it lives on.
func (o *Observer) Name() string { return o.name }

// CandidateID is the ID this candidate campaigns with.
func (e *Election) CandidateID() string { return e.id }

// TTL is the requested lease TTL (a backend may grant a different one).
func (e *Election) TTL() time.Duration { return e.cfg.TTL }

// RetryPeriod is the followers' nominal delay between attempts.
func (e *Election) RetryPeriod() time.Duration { return e.retryPeriod }

// Campaign implements dsync.LeaderElection: it blocks until this candidate
// leads, or ctx ends, and returns a *Leadership whose lease is renewed in
// the background until Resign or loss. Between attempts it waits about
// RetryPeriod (or as Options.Retry says), or less when the backend reports
// a release.
//
// On failure nothing is held and the error matches dsync.ErrNotAcquired,
// ctx's error when ctx ended, and dsync.ErrUnavailable when the last
// attempt found the backend unable to decide. Campaign fails at once, with an error
// matching ErrDuplicateID, while this candidate ID already campaigns or
// leads in an election of the same name on the same *dsync.Backend. If
// the current leader has this candidate's ID but is not this Backend's,
// Campaign waits out the remaining TTL that the backend reports for it
// (the hold of a previous run of this process, which crashed, expires by
// then), and fails with ErrDuplicateID if that leader is still there after
// it: another live client campaigns with the same ID. Errors no retry can cure (a closed backend: dsync.ErrClosed;
// dsync.ErrInvalid, dsync.ErrUnsupported) end it at once; other failed
// attempts are retried.
func (e *Election) Campaign(ctx context.Context) (dsync.Leadership, error) {
	l, err := e.campaign(ctx)
	if err != nil {
		return nil, err // not a typed nil
	}
	return l, nil
}

func (e *Election) campaign(ctx context.Context) (*Leadership, error) {
	c, err := e.register()
	if err != nil {
		return nil, err
	}
	var dup dupWatch
	ls, err := e.cfg.Acquire(ctx, func(ctx context.Context) error { return e.checkDuplicate(ctx, &dup) })
	if err != nil {
		c.unregister()
		return nil, err
	}
	l := &Leadership{lease: ls, c: c}
	c.lead(l)
	if !dup.renewed.IsZero() {
		e.cfg.Telemetry().Failover(ctx, time.Since(dup.renewed))
	}
	return l, nil
}

// dupWatch tracks how long the election's leader has had our candidate ID,
// and when another leader was last seen renewing its term.
type dupWatch struct {
	deadline time.Time // zero while the leader has another ID
	// renewed is the latest renewal of another leader's term, estimated
	// from the TTL left on it: the start of a failover, once it ends in
	// this candidate's term.
	renewed time.Time
}

// sawLeader estimates when the leader last renewed its term from the TTL
// it has left.
func (w *dupWatch) sawLeader(e *Election, info backends.HolderInfo) {
	if info.TTL <= 0 {
		return
	}
	at := time.Now().Add(-max(e.cfg.TTL-info.TTL, 0))
	if at.After(w.renewed) {
		w.renewed = at
	}
}

// checkDuplicate reads the leader after a lost attempt. A leader with our
// ID that outlives the TTL the backend reported for it when first seen has
// been renewed since: another live process uses our ID.
func (e *Election) checkDuplicate(ctx context.Context, w *dupWatch) error {
	info, err := e.cfg.Driver.Holder(ctx, e.name)
	if err != nil || string(info.Value) != e.id {
		w.deadline = time.Time{}
		if err == nil {
			w.sawLeader(e, info)
		}
		return nil
	}
	now := time.Now()
	if w.deadline.IsZero() {
		ttl := info.TTL
		if ttl <= 0 {
			ttl = e.cfg.TTL
		}
		// The backend reports TTLs to its resolution (etcd: whole seconds).
		w.deadline = now.Add(ttl + e.cfg.Driver.Capabilities().TTLResolution + e.retryPeriod)
		return nil
	}
	if now.After(w.deadline) {
		return fmt.Errorf("%w: %w: %q leads election %q from another process, and has renewed its term: give every candidate an ID of its own",
			dsync.ErrNotAcquired, ErrDuplicateID, e.id, e.name)
	}
	return nil
}

// Leader reads the current leader from the backend (dsync.LeaderElection):
// its candidate ID and its term, the Term of its Leadership (zero on a
// backend without fencing), in one attempt bounded by ctx and the
// backend's request timeout. With no leader it returns an error matching
// dsync.ErrNoLeader; a failed read, one matching dsync.ErrUnavailable. On
// Redlock, the leader is the ID that a majority of the nodes agree on, and
// the term the token that a majority of them record (the largest one that
// the nodes which answer record, when they make no majority).
func (o *Observer) Leader(ctx context.Context) (dsync.LeaderInfo, error) {
	info, err := o.cfg.Driver.Holder(ctx, o.name)
	switch {
	case errors.Is(err, dsync.ErrNotHeld):
		return dsync.LeaderInfo{}, fmt.Errorf("%w: election %q", dsync.ErrNoLeader, o.name)
	case err != nil:
		return dsync.LeaderInfo{}, lease.Unavailable(o.name, err)
	}
	li := dsync.LeaderInfo{ID: string(info.Value)}
	if o.cfg.Driver.Capabilities().Fencing {
		li.Term = info.Fence
	}
	return li, nil
}

// Observe returns a channel that receives the election's state as a first
// read finds it, then each state a later read finds that differs from the
// last one sent (dsync.LeaderElection): the leader's candidate ID and
// term, as Leader reads them, or the zero LeaderInfo for no leader. It
// reads every ObserveInterval, and at once when the backend reports a
// release, so a resignation shows at once.
//
// It reports what its reads find, not every term: a term that begins and
// ends between two reads is not seen, nor, on a backend without fencing, a
// leader that resigned and won again between them (one ID twice is one
// state there; with fencing, its new term is a new state); a failed read
// is retried at the next one. A term, or a time without leader, that lasts longer
// than ObserveInterval plus twice the time a read takes is seen, as long
// as reads succeed and the receiver keeps up. To act on every term, a
// leader passes its Term to what it writes.
//
// A goroutine does the reading; it stops, and closes the channel, when ctx
// ends or the backend is closed. Receive until the channel is closed: an
// unread state holds the goroutine (it sends the next state only once the
// previous one was received, or ctx ended).
func (o *Observer) Observe(ctx context.Context) <-chan dsync.LeaderInfo {
	ch := make(chan dsync.LeaderInfo)
	go o.observe(ctx, ch)
	return ch
}

func (o *Observer) observe(ctx context.Context, ch chan<- dsync.LeaderInfo) {
	defer close(ch)
	var wake <-chan backends.Notice
	if sub, err := o.cfg.Driver.WatchReleases(ctx, o.name); err == nil {
		defer sub.Close()
		wake = sub.C()
	}
	t := time.NewTicker(o.observeInterval)
	defer t.Stop()
	var last dsync.LeaderInfo
	sent := false
	for {
		li, err := o.Leader(ctx)
		switch {
		case err == nil || errors.Is(err, dsync.ErrNoLeader):
			if !sent || li != last {
				if sent {
					o.cfg.Telemetry().Observed(ctx, li.ID, li.Term)
				}
				select {
				case ch <- li:
				case <-ctx.Done():
					return
				}
				last, sent = li, true
			}
		case errors.Is(err, dsync.ErrClosed):
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}
