package backendtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
)

// testElectObserve: Leader and Observe report the leader and its term
// (the leader's Leadership.Term: its fencing token, zero without fencing),
// and the lack of a leader, as terms come and go, to an observer without a
// candidate ID.
func (s *suite) testElectObserve(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	opts := &leader.Options{TTL: s.electionTTL(), ObserveInterval: 50 * time.Millisecond}
	obs, err := leader.NewObserver(s.backend(t), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	fencing := lease.Driver(s.backend(t)).Capabilities().Fencing
	// want is what Leader and Observe must report while l leads as id.
	want := func(id string, l dsync.Leadership) dsync.LeaderInfo {
		if !fencing && l.Term() != 0 {
			t.Errorf("term %d on a backend without fencing, want 0", l.Term())
		}
		if fencing && l.Term() == 0 {
			t.Errorf("term 0 on a backend with fencing")
		}
		return dsync.LeaderInfo{ID: id, Term: l.Term()}
	}
	if _, err := obs.Leader(ctx); !errors.Is(err, dsync.ErrNoLeader) {
		t.Fatalf("Leader of an empty election: %v, want ErrNoLeader", err)
	}
	octx, stop := context.WithCancel(ctx)
	ch := obs.Observe(octx)
	defer func() {
		stop()
		for range ch { // the stream ends with ctx
		}
	}()
	next := func() dsync.LeaderInfo {
		t.Helper()
		select {
		case info, ok := <-ch:
			if !ok {
				t.Fatal("Observe's channel closed early")
			}
			return info
		case <-time.After(10 * time.Second):
			t.Fatal("Observe reported no change within 10s")
			return dsync.LeaderInfo{}
		}
	}
	if info := next(); info != (dsync.LeaderInfo{}) {
		t.Fatalf("first state %+v, want no leader", info)
	}
	la, err := newElection(t, s.backend(t), name, "a", opts).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantA := want("a", la)
	if info := next(); info != wantA {
		t.Fatalf("Observe sent %+v, want %+v (a's term)", info, wantA)
	}
	if info, err := obs.Leader(ctx); err != nil || info != wantA {
		t.Fatalf("Leader = %+v, %v; want %+v (a's term)", info, err, wantA)
	}
	got := make(chan dsync.Leadership, 1)
	go func() {
		l, err := newElection(t, s.backend(t), name, "b", opts).Campaign(ctx)
		if err != nil {
			t.Errorf("b's Campaign: %v", err)
		}
		got <- l
	}()
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	info := next()
	if info.ID == "" {
		info = next()
	}
	lb := <-got
	if lb == nil {
		return
	}
	if wantB := want("b", lb); info != wantB {
		t.Fatalf("Observe sent %+v after a resigned, want %+v, b's term (or no leader, then that)", info, wantB)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(); info != (dsync.LeaderInfo{}) {
		t.Fatalf("Observe sent %+v after b resigned, want no leader", info)
	}
}

// testElectObserveTerms: Observe's promise: every term that lasts well
// over ObserveInterval is reported, once, in order, through hand-overs by
// resignation (terms shorter than the interval may go unseen: not
// checked).
func (s *suite) testElectObserveTerms(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	const interval = 50 * time.Millisecond
	opts := &leader.Options{TTL: s.electionTTL(), ObserveInterval: interval}
	obs, err := leader.NewObserver(s.backend(t), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	ch := obs.Observe(octx)
	var (
		mu   sync.Mutex // protects seen
		seen []string   // the leaders reported, "no leader" left out
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info := range ch {
			if info.ID != "" {
				mu.Lock()
				seen = append(seen, info.ID)
				mu.Unlock()
			}
		}
	}()
	defer func() {
		stop()
		<-done
	}()
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		l, err := newElection(t, s.backend(t), name, id, opts).Campaign(ctx)
		if err != nil {
			t.Fatalf("%s's Campaign: %v", id, err)
		}
		time.Sleep(10 * interval) // the term's length: a clock to wait out
		if err := l.Resign(ctx); err != nil {
			t.Fatalf("%s's Resign: %v", id, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "Observe to report every term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= len(ids)
	})
	stop()
	<-done
	if !slices.Equal(seen, ids) {
		t.Fatalf("Observe reported leaders %q, want %q: each term lasted 10 observe intervals", seen, ids)
	}
}
