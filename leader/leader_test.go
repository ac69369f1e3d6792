package leader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// newStore returns a memory store; inside a synctest bubble its clock is
// the bubble's, so lease timing is exact.
func newStore() *memory.Store { return memory.NewStore(nil) }

// backendOn returns a new client of store, closed at the end of the test.
func backendOn(t *testing.T, store *memory.Store) *dsync.Backend {
	t.Helper()
	return testutil.Memory(t, &memory.Options{Store: store})
}

func newElection(t *testing.T, b *dsync.Backend, name, id string, opts *leader.Options) *leader.Election {
	t.Helper()
	e, err := leader.New(b, name, id, opts)
	if err != nil {
		t.Fatalf("leader.New(%q, %q): %v", name, id, err)
	}
	return e
}

func campaign(t *testing.T, e *leader.Election) *leader.Leadership {
	t.Helper()
	l, err := e.Campaign(context.Background())
	if err != nil {
		t.Fatalf("Campaign(%s): %v", e.CandidateID(), err)
	}
	return l.(*leader.Leadership)
}

func TestNewValidates(t *testing.T) {
	b := backendOn(t, newStore())
	for _, tc := range []struct {
		name, election, id string
		nilB               bool
		opts               *leader.Options
		field              string
	}{
		{name: "nil backend", election: "e", id: "a", nilB: true, field: "backend"},
		{name: "empty name", election: "", id: "a", field: "name"},
		{name: "empty candidate id", election: "e", id: "", field: "candidate id"},
		{name: "candidate id too large", election: "e", id: strings.Repeat("x", backends.MaxValueSize+1), field: "candidate id"},
		{name: "negative ttl", election: "e", id: "a", opts: &leader.Options{TTL: -time.Second}, field: "ttl"},
		{name: "ttl eaten by drift", election: "e", id: "a", opts: &leader.Options{TTL: time.Second, DriftMin: 2 * time.Second}, field: "ttl"},
		{name: "negative renew interval", election: "e", id: "a", opts: &leader.Options{RenewInterval: -1}, field: "renew interval"},
		{name: "renew interval past validity", election: "e", id: "a", opts: &leader.Options{TTL: time.Second, RenewInterval: time.Second}, field: "renew interval"},
		{name: "negative retry period", election: "e", id: "a", opts: &leader.Options{RetryPeriod: -1}, field: "retry period"},
		{name: "retry period not below ttl", election: "e", id: "a", opts: &leader.Options{TTL: time.Second, RetryPeriod: time.Second}, field: "retry period"},
		{name: "negative observe interval", election: "e", id: "a", opts: &leader.Options{ObserveInterval: -1}, field: "observe interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bb := b
			if tc.nilB {
				bb = nil
			}
			_, err := leader.New(bb, tc.election, tc.id, tc.opts)
			var ie *dsync.InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, dsync.ErrInvalid) || ie.Field != tc.field {
				t.Fatalf("New: %v, want an *InvalidError on %q", err, tc.field)
			}
		})
	}
}

// TestNewObserverValidates: an observer needs no candidate ID, and its
// options are checked as an election's are.
func TestNewObserverValidates(t *testing.T) {
	b := backendOn(t, newStore())
	if _, err := leader.NewObserver(b, "e", nil); err != nil {
		t.Fatalf("NewObserver without options: %v", err)
	}
	for _, tc := range []struct {
		name, election string
		nilB           bool
		opts           *leader.Options
		field          string
	}{
		{name: "nil backend", election: "e", nilB: true, field: "backend"},
		{name: "empty name", election: "", field: "name"},
		{name: "negative observe interval", election: "e", opts: &leader.Options{ObserveInterval: -1}, field: "observe interval"},
		{name: "retry period not below ttl", election: "e", opts: &leader.Options{TTL: time.Second, RetryPeriod: time.Second}, field: "retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bb := b
			if tc.nilB {
				bb = nil
			}
			_, err := leader.NewObserver(bb, tc.election, tc.opts)
			var ie *dsync.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("NewObserver: %v, want an *InvalidError on %q", err, tc.field)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	b := backendOn(t, newStore())
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{0, time.Second}, // 10s TTL: TTL/4 capped at 1s
		{2 * time.Second, 500 * time.Millisecond},
		{time.Minute, time.Second},
	} {
		e := newElection(t, b, "e", "a", &leader.Options{TTL: tc.ttl})
		if got := e.RetryPeriod(); got != tc.want {
			t.Errorf("TTL %v: RetryPeriod %v, want %v", tc.ttl, got, tc.want)
		}
	}
	if got := newElection(t, b, "e", "a", nil).TTL(); got != 10*time.Second {
		t.Errorf("default TTL %v, want 10s", got)
	}
}

// TestResignHandsOver: a follower waiting out a long retry period takes
// over as soon as the leader resigns, with a greater term.
func TestResignHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		opts := &leader.Options{TTL: 10 * time.Second, RetryPeriod: 9 * time.Second}
		a := newElection(t, backendOn(t, store), "e", "a", opts)
		bEl := newElection(t, backendOn(t, store), "e", "b", opts)
		la := campaign(t, a)
		got := make(chan *leader.Leadership)
		go func() { got <- campaign(t, bEl) }()
		time.Sleep(time.Second) // fake time: b has tried and is waiting
		synctest.Wait()
		if li, err := a.Leader(context.Background()); err != nil || li != (dsync.LeaderInfo{ID: "a", Term: la.Term()}) {
			t.Fatalf("Leader = %+v, %v; want a in term %d", li, err, la.Term())
		}
		resigned := time.Now()
		if err := la.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		lb := <-got
		if d := time.Since(resigned); d != 0 {
			t.Errorf("b took over %v after the resignation, want at once (release notice)", d)
		}
		if lb.Term() <= la.Term() {
			t.Errorf("term %d after term %d", lb.Term(), la.Term())
		}
		if err := la.Err(); !errors.Is(err, dsync.ErrReleased) {
			t.Errorf("resigned leadership Err = %v, want ErrReleased", err)
		}
		if err := la.Resign(context.Background()); !errors.Is(err, dsync.ErrNotHeld) {
			t.Errorf("second Resign = %v, want ErrNotHeld", err)
		}
		if li, err := a.Leader(context.Background()); err != nil || li != (dsync.LeaderInfo{ID: "b", Term: lb.Term()}) {
			t.Fatalf("Leader = %+v, %v; want b in term %d", li, err, lb.Term())
		}
		if err := lb.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Leader(context.Background()); !errors.Is(err, dsync.ErrNoLeader) {
			t.Fatalf("Leader with nobody leading: %v, want ErrNoLeader", err)
		}
	})
}

// TestLeadershipIsRenewedIndefinitely: no hold bound applies to a leader.
func TestLeadershipIsRenewedIndefinitely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newElection(t, backendOn(t, newStore()), "e", "a", &leader.Options{TTL: 3 * time.Second})
		l := campaign(t, e)
		time.Sleep(5 * time.Hour)
		if err := l.Err(); err != nil {
			t.Fatalf("leadership ended after 5h of renewals: %v", err)
		}
		if err := l.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLossIsSeenAtTheNextRenewal: a leader whose hold disappears learns it
// at its next renewal, and a follower then leads with a greater term.
func TestLossIsSeenAtTheNextRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		opts := &leader.Options{TTL: 3 * time.Second}
		a := newElection(t, backendOn(t, store), "e", "a", opts)
		other := backendOn(t, store)
		start := time.Now()
		la := campaign(t, a)
		if err := lease.Driver(other).Release(context.Background(), "e", holdToken(t, la)); err != nil {
			t.Fatal(err)
		}
		<-la.Done()
		if d := time.Since(start); d != time.Second {
			t.Errorf("loss seen after %v, want at the first renewal (TTL/3 = 1s)", d)
		}
		if err := la.Err(); !errors.Is(err, dsync.ErrLeaseLost) {
			t.Errorf("Err = %v, want ErrLeaseLost", err)
		}
		lb := campaign(t, newElection(t, other, "e", "b", opts))
		if lb.Term() <= la.Term() {
			t.Errorf("term %d after term %d", lb.Term(), la.Term())
		}
		if err := la.Resign(context.Background()); !errors.Is(err, dsync.ErrNotHeld) || !errors.Is(err, dsync.ErrLeaseLost) {
			t.Errorf("Resign after loss = %v, want ErrNotHeld wrapping ErrLeaseLost", err)
		}
		// The lost candidacy is over: a may campaign again.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := a.Campaign(ctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leader.ErrDuplicateID) {
			t.Errorf("Campaign while b leads: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		_ = lb.Resign(context.Background())
	})
}

func TestCampaignCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		la := campaign(t, newElection(t, backendOn(t, store), "e", "a", nil))
		defer la.Resign(context.Background())
		e := newElection(t, backendOn(t, store), "e", "b", nil)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Second, cancel)
		if _, err := e.Campaign(ctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Campaign: %v, want ErrNotAcquired and Canceled", err)
		}
		if _, err := e.Campaign(ctx); !errors.Is(err, dsync.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign on a done context: %v, want ErrNotAcquired and Canceled", err)
		}
	})
}

func TestCampaignOnClosedBackend(t *testing.T) {
	b := backendOn(t, newStore())
	e := newElection(t, b, "e", "a", nil)
	_ = b.Close()
	if _, err := e.Campaign(context.Background()); !errors.Is(err, dsync.ErrClosed) {
		t.Fatalf("Campaign after Close: %v, want ErrClosed", err)
	}
}

// TestDuplicateInProcess: one candidate ID campaigns once at a time.
func TestDuplicateInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := backendOn(t, newStore())
		e1 := newElection(t, b, "e", "a", nil)
		e2 := newElection(t, b, "e", "a", nil)
		l := campaign(t, e1)
		for _, e := range []*leader.Election{e1, e2} {
			if _, err := e.Campaign(context.Background()); !errors.Is(err, leader.ErrDuplicateID) || !errors.Is(err, dsync.ErrNotAcquired) {
				t.Fatalf("second Campaign of one ID: %v, want ErrDuplicateID", err)
			}
		}
		// Another election, or another ID, is not a duplicate.
		other := campaign(t, newElection(t, b, "f", "a", nil))
		_ = other.Resign(context.Background())
		if err := l.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		l2 := campaign(t, e2)
		_ = l2.Resign(context.Background())
	})
}

// TestSameIDOnIndependentBackends: candidacies live on their backend, so
// one candidate ID leads at once on two unrelated backends (two stores,
// each wrapped by NewBackend under the same name "memory").
func TestSameIDOnIndependentBackends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b1, b2 := backendOn(t, newStore()), backendOn(t, newStore())
		if b1.String() != b2.String() {
			t.Fatalf("backends named %q and %q: the test needs equal names", b1, b2)
		}
		ctx := context.Background()
		ready := make(chan struct{})
		type result struct {
			l   dsync.Leadership
			err error
		}
		results := make(chan result, 2)
		for _, b := range []*dsync.Backend{b1, b2} {
			e := newElection(t, b, "e", "a", nil)
			go func() {
				<-ready
				l, err := e.Campaign(ctx)
				results <- result{l, err}
			}()
		}
		close(ready)
		for range 2 {
			r := <-results
			if r.err != nil {
				t.Errorf("Campaign on one of two independent backends: %v", r.err)
				continue
			}
			defer r.l.Resign(ctx)
		}
	})
}

// holdAs places a hold with value id on the election's key through the
// driver, as another process of that ID would, and renews it until the
// returned function is called (renew false: a crashed process's hold).
func holdAs(t *testing.T, d backends.Driver, name, id string, ttl time.Duration, renew bool) (stop func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Acquire(ctx, backends.Request{Key: name, Token: "other-" + id, Value: []byte(id), TTL: ttl, Fence: true}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for renew {
			select {
			case <-done:
				return
			case <-time.After(ttl / 3):
				_ = d.Refresh(ctx, name, "other-"+id, ttl)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		_ = d.Release(ctx, name, "other-"+id)
	}
}

// TestDuplicateAcrossProcesses: a leader with our ID that keeps renewing is
// another live process; one that expires is an earlier run of ours.
func TestDuplicateAcrossProcesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		const ttl = 3 * time.Second
		e := newElection(t, backendOn(t, store), "e", "a", &leader.Options{TTL: ttl})

		stop := holdAs(t, lease.Driver(backendOn(t, store)), "e", "a", ttl, true)
		start := time.Now()
		_, err := e.Campaign(context.Background())
		stop()
		if !errors.Is(err, leader.ErrDuplicateID) || !errors.Is(err, dsync.ErrNotAcquired) || !strings.Contains(err.Error(), "another process") {
			t.Fatalf("Campaign against a live duplicate: %v, want ErrDuplicateID", err)
		}
		if d := time.Since(start); d < ttl || d > 2*ttl {
			t.Errorf("duplicate reported after %v, want between one and two TTLs (%v)", d, ttl)
		}

		stop = holdAs(t, lease.Driver(backendOn(t, store)), "e", "a", ttl, false)
		start = time.Now()
		l := campaign(t, e) // waits out the stale hold
		if d := time.Since(start); d < ttl-time.Millisecond {
			t.Errorf("led %v after a stale hold of ttl %v appeared", d, ttl)
		}
		stop()
		_ = l.Resign(context.Background())
	})
}

// TestObserve: the stream starts with the current state, follows leaders
// and the lack of one, sends no repeats, and closes when ctx ends.
func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		opts := &leader.Options{TTL: 3 * time.Second, ObserveInterval: 100 * time.Millisecond}
		obs := newElection(t, backendOn(t, store), "e", "observer", opts)
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.Observe(ctx)
		next := func(want string) {
			t.Helper()
			select {
			case info := <-ch:
				if info.ID != want {
					t.Fatalf("Observe sent %q, want %q", info.ID, want)
				}
			case <-time.After(time.Second):
				t.Fatalf("Observe sent nothing, want %q", want)
			}
		}
		next("")
		la := campaign(t, newElection(t, backendOn(t, store), "e", "a", opts))
		next("a")
		time.Sleep(time.Second) // renewals must not be reported as changes
		synctest.Wait()
		select {
		case info := <-ch:
			t.Fatalf("Observe repeated a state: %q", info.ID)
		default:
		}
		_ = la.Resign(context.Background())
		next("") // seen at once, on the release notice
		lb := campaign(t, newElection(t, backendOn(t, store), "e", "b", opts))
		next("b")
		_ = lb.Resign(context.Background())
		next("")
		cancel()
		for range ch { // drained until closed
		}
	})
}

func TestObserveEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := backendOn(t, newStore())
		ch := newElection(t, b, "e", "a", nil).Observe(context.Background())
		if info := <-ch; info.ID != "" {
			t.Fatalf("first state %q, want no leader", info.ID)
		}
		_ = b.Close()
		for range ch {
		}
	})
}

// holdToken is the secret token of a term's hold on the backend.
func holdToken(t *testing.T, l dsync.Leadership) string {
	t.Helper()
	tok, ok := lease.HoldToken(l)
	if !ok {
		t.Fatalf("%T has no hold token", l)
	}
	return tok
}
