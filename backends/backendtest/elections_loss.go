package backendtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
)

// Checks of a term that ends without a resignation, in one process: the
// leader's hold removed from the server, and the leader cut off from it.

// recorder wraps an election and passes on the leaderships it wins.
type recorder struct {
	*leader.Election
	won chan dsync.Leadership
}

func (r *recorder) Campaign(ctx context.Context) (dsync.Leadership, error) {
	l, err := r.Election.Campaign(ctx)
	if err == nil {
		r.won <- l
	}
	return l, err
}

// termLog records the hooks of leader.Run.
type termLog struct {
	mu      sync.Mutex // protects events
	events  []string
	stopped chan error // each OnStopped's error
}

func newTermLog() *termLog { return &termLog{stopped: make(chan error, 16)} }

func (l *termLog) options() *leader.RunOptions {
	return &leader.RunOptions{
		OnStarted: func(term uint64) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.events = append(l.events, "started "+strconv.FormatUint(term, 10))
		},
		OnStopped: func(term uint64, err error) {
			l.mu.Lock()
			l.events = append(l.events, "stopped "+strconv.FormatUint(term, 10))
			l.mu.Unlock()
			l.stopped <- err
		},
	}
}

// checkPairs fails unless the hooks came in pairs of one term each.
func (l *termLog) checkPairs(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, ev := range l.events {
		var want string
		if i%2 == 1 {
			want = "stopped " + l.events[i-1][len("started "):]
		}
		if (i%2 == 0 && ev[:len("started")] != "started") || (i%2 == 1 && ev != want) {
			t.Fatalf("hooks out of pairs: %v", l.events)
		}
	}
	if len(l.events)%2 != 0 {
		t.Fatalf("a term started and never stopped: %v", l.events)
	}
}

// testElectLostHold: when a leader's hold disappears from the server (an
// operator deleted it, a server lost it), the leader sees the loss at its
// next renewal: Done closes with ErrLeaseLost, Run cancels fn's context
// with the loss as cause, and the next term is greater.
func (s *suite) testElectLostHold(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	ttl := s.electionTTL()
	renew := ttl / 5
	e := &recorder{newElection(t, s.backend(t), name, "a", &leader.Options{TTL: ttl, RenewInterval: renew}), make(chan dsync.Leadership, 2)}
	causes := make(chan error, 2)
	log := newTermLog()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() {
		ran <- leader.Run(runCtx, e, func(ctx context.Context, term uint64) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		}, log.options())
	}()
	l1 := <-e.won
	if err := lease.Driver(s.backend(t)).Release(ctx, name, holdToken(t, l1)); err != nil {
		t.Fatalf("releasing the leader's hold through the driver: %v", err)
	}
	removed := time.Now()
	select {
	case <-l1.Done():
		t.Logf("leader saw the loss %v after its hold was removed (renew interval %v)", time.Since(removed), renew)
	case <-time.After(renew + 10*time.Second):
		t.Fatalf("leadership not ended %v after its hold was removed (renew interval %v)", renew+10*time.Second, renew)
	}
	if err := l1.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", err)
	}
	if cause := <-causes; !errors.Is(cause, dsync.ErrLeaseLost) {
		t.Errorf("fn's context cause = %v, want ErrLeaseLost", cause)
	}
	if err := <-log.stopped; !errors.Is(err, dsync.ErrLeaseLost) {
		t.Errorf("OnStopped = %v, want ErrLeaseLost", err)
	}
	select {
	case l2 := <-e.won: // Run campaigned again
		if f := lease.Driver(s.backend(t)).Capabilities().Fencing; f && l2.Term() <= l1.Term() {
			t.Errorf("term %d after the lost term %d", l2.Term(), l1.Term())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not lead again after the loss")
	}
	stop()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want Canceled", err)
	}
	log.checkPairs(t)
}

// testElectCutOff: a leader cut off from the server (every request fails)
// stops leading when its lease's validity runs out, and the follower is
// granted leadership only after that moment.
func (s *suite) testElectCutOff(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	ttl := s.h.ShortTTL
	ba, cd := s.spyOn(t)
	a := newElection(t, ba, name, "a", &leader.Options{TTL: ttl})
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := newElection(t, s.backend(t), name, "b", &leader.Options{TTL: ttl})
	got, fail := campaignInBackground(ctx, follower)
	time.Sleep(ttl) // some renewals first: the cadence under test
	cut := time.Now()
	cd.link.Store(linkCut)
	if h, err := ba.Health(ctx); err != nil || h.OK {
		t.Errorf("Health of a backend cut off from its server = %+v, %v; want not OK", h, err)
	}
	var lostAt time.Time
	select {
	case <-la.Done():
		lostAt = time.Now()
	case <-time.After(3 * ttl):
		t.Fatalf("cut-off leader still leads %v later (ttl %v)", 3*ttl, ttl)
	}
	if err := la.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", err)
	}
	select {
	case lb := <-got:
		led := time.Now()
		if led.Before(lostAt) {
			t.Errorf("follower led %v before the cut-off leader knew it had lost", lostAt.Sub(led))
		}
		if f := lease.Driver(s.backend(t)).Capabilities().Fencing; f && lb.Term() <= la.Term() {
			t.Errorf("term %d after term %d", lb.Term(), la.Term())
		}
		t.Logf("cut-off leader knew of its loss %v after the cut, the follower led %v after the cut (ttl %v, retry period %v)",
			lostAt.Sub(cut), led.Sub(cut), ttl, follower.RetryPeriod())
		_ = lb.Resign(ctx)
	case err := <-fail:
		t.Fatalf("follower: %v", err)
	case <-time.After(3*ttl + 10*time.Second):
		t.Fatal("follower never led after the leader was cut off")
	}
}
