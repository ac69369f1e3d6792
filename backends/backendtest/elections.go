package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
)

// runElections runs the leader-election checks.
func (s *suite) runElections(t *testing.T) {
	runChecks(t, []check{
		{"OneLeaderPerTerm", s.testElectOneLeader},
		{"ResignHandsOver", s.testElectResign},
		{"LostHoldEndsTerm", s.testElectLostHold},
		{"CutOffLeaderYields", s.testElectCutOff},
		{"LeaderAndObserve", s.testElectObserve},
		{"ObserveSeesLongTerms", s.testElectObserveTerms},
		{"DuplicateID", s.testElectDuplicate},
		{"KilledLeaderFailover", s.testElectKilledLeader},
		{"PausedLeaderFenced", s.testElectPausedLeader},
	})
}

// campaignInBackground runs e's Campaign on a goroutine of its own: got
// receives the leadership, or fail the error. Both are buffered, so the
// goroutine never blocks once Campaign returns.
func campaignInBackground(ctx context.Context, e *leader.Election) (got <-chan dsync.Leadership, fail <-chan error) {
	g, f := make(chan dsync.Leadership, 1), make(chan error, 1)
	go func() {
		l, err := e.Campaign(ctx)
		if err != nil {
			f <- err
			return
		}
		g <- l
	}()
	return g, f
}

func newElection(t testing.TB, b *dsync.Backend, name, id string, opts *leader.Options) *leader.Election {
	t.Helper()
	e, err := leader.New(b, name, id, opts)
	if err != nil {
		t.Fatalf("leader.New(%q, %q): %v", name, id, err)
	}
	return e
}

// holdToken is the secret token of the hold of a lease, permit or
// leadership on the backend.
func holdToken(t testing.TB, l any) string {
	t.Helper()
	tok, ok := lease.HoldToken(l)
	if !ok {
		t.Fatalf("%T has no hold token", l)
	}
	return tok
}

// electionTTL is a TTL that does not run out while a leader renews it,
// even on a loaded machine.
func (s *suite) electionTTL() time.Duration { return 5 * s.h.ShortTTL }

// testElectOneLeader: candidates over several clients run leader.Run
// until a number of terms have passed; at no moment do two of them
// believe they lead, no term has two leaders, and terms grow.
func (s *suite) testElectOneLeader(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	fencing := lease.Driver(s.backend(t)).Capabilities().Fencing
	const clients, perClient, terms = 3, 2, 15
	var (
		mu         sync.Mutex // protects the fields below
		current    string     // the candidate that believes it leads
		lastTerm   uint64
		seen       = map[uint64]string{}
		count      int
		violations []string
		wg         sync.WaitGroup
		errs       = make(chan error, clients*perClient)
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	opts := &leader.Options{TTL: s.electionTTL()}
	for c := range clients {
		b := s.backend(t)
		for g := range perClient {
			id := fmt.Sprintf("candidate-%d-%d", c, g)
			e := newElection(t, b, name, id, opts)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := leader.Run(runCtx, e, func(ctx context.Context, term uint64) error {
					mu.Lock()
					if current != "" {
						violations = append(violations, fmt.Sprintf("%s leads in term %d while %s believes it leads", id, term, current))
					}
					if other, dup := seen[term]; dup && fencing {
						violations = append(violations, fmt.Sprintf("term %d led by %s and %s", term, other, id))
					}
					if fencing && term <= lastTerm {
						violations = append(violations, fmt.Sprintf("term %d after term %d", term, lastTerm))
					}
					current, lastTerm, seen[term] = id, max(lastTerm, term), id
					count++
					if count == terms {
						stop()
					}
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(2 * time.Millisecond): // the leader's work
					}
					mu.Lock()
					current = ""
					mu.Unlock()
					return nil
				}, &leader.RunOptions{RecampaignDelay: time.Millisecond})
				if !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("%s: Run = %v, want Canceled", id, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if count < terms {
		t.Fatalf("%d terms, want %d", count, terms)
	}
	leaders := map[string]bool{}
	for _, id := range seen {
		leaders[id] = true
	}
	t.Logf("%d terms among %d candidates, %d distinct leaders", count, clients*perClient, len(leaders))
}

// testElectResign: a follower sleeping out a long retry delay leads as soon
// as the leader resigns, woken by the backend's release notice.
func (s *suite) testElectResign(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	b := s.backend(t)
	if !lease.Driver(b).Capabilities().ReleaseNotices {
		t.Skipf("the %s driver offers no release notices", lease.Driver(b).Capabilities().Name)
	}
	ttl := s.electionTTL()
	la, err := newElection(t, s.backend(t), name, "a", &leader.Options{TTL: ttl}).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const retryDelay = 30 * time.Second
	p := &signalPolicy{delay: retryDelay, waiting: make(chan struct{}, 1)}
	follower := newElection(t, b, name, "b", &leader.Options{TTL: ttl, Retry: p})
	got, fail := campaignInBackground(ctx, follower)
	select {
	case <-p.waiting: // the follower lost an attempt and sleeps
	case err := <-fail:
		t.Fatalf("follower: %v", err)
	}
	resigned := time.Now()
	if err := la.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	select {
	case lb := <-got:
		t.Logf("follower led %v after the resignation", time.Since(resigned))
		if f := lease.Driver(s.backend(t)).Capabilities().Fencing; f && lb.Term() <= la.Term() {
			t.Errorf("term %d after term %d", lb.Term(), la.Term())
		}
		if info, err := follower.Leader(ctx); err != nil || info != (dsync.LeaderInfo{ID: "b", Term: lb.Term()}) {
			t.Errorf("Leader = %+v, %v; want b in term %d", info, err, lb.Term())
		}
		if err := lb.Resign(ctx); err != nil {
			t.Errorf("Resign: %v", err)
		}
	case err := <-fail:
		t.Fatalf("follower: %v", err)
	case <-time.After(retryDelay / 3):
		t.Fatalf("follower not leading %v after the resignation (its retry delay is %v)", retryDelay/3, retryDelay)
	}
}

// testElectDuplicate: one candidate ID campaigns once at a time in a
// process, and a live leader of our ID elsewhere is reported.
func (s *suite) testElectDuplicate(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	ttl := s.h.ShortTTL
	opts := &leader.Options{TTL: ttl}
	l, err := newElection(t, s.backend(t), name, "a", opts).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newElection(t, s.backend(t), name, "a", opts).Campaign(ctx); !errors.Is(err, leader.ErrDuplicateID) {
		t.Fatalf("Campaign of an ID that leads in this process: %v, want ErrDuplicateID", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// Another process of the same ID: a hold with our ID, renewed.
	d := lease.Driver(s.backend(t))
	g, err := d.Acquire(ctx, backends.Request{Key: name, Token: "twin", Value: []byte("a"), TTL: ttl, Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan struct{})
	stopRenew := make(chan struct{})
	go func() {
		defer close(renewed)
		for {
			select {
			case <-stopRenew:
				return
			case <-time.After(g.TTL / 4):
				_ = d.Refresh(ctx, name, "twin", g.TTL)
			}
		}
	}()
	start := time.Now()
	_, err = newElection(t, s.backend(t), name, "a", opts).Campaign(ctx)
	close(stopRenew)
	<-renewed
	_ = d.Release(ctx, name, "twin")
	if !errors.Is(err, leader.ErrDuplicateID) {
		t.Fatalf("Campaign against a live leader of the same ID: %v, want ErrDuplicateID", err)
	}
	t.Logf("duplicate ID reported after %v (ttl %v)", time.Since(start), g.TTL)
}
