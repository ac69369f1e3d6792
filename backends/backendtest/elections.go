package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
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
	h, ok := l.(interface{ HoldToken() string })
	if !ok {
		t.Fatalf("%T has no HoldToken", l)
	}
	return h.HoldToken()
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
	fencing := s.backend(t).Driver().Capabilities().Fencing
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
	if !b.Driver().Capabilities().ReleaseNotices {
		t.Skipf("the %s driver offers no release notices", b.Driver().Capabilities().Name)
	}
	ttl := s.electionTTL()
	la, err := newElection(t, s.backend(t), name, "a", &leader.Options{TTL: ttl}).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const retryDelay = 30 * time.Second
	p := &signalPolicy{delay: retryDelay, waiting: make(chan struct{}, 1)}
	follower := newElection(t, b, name, "b", &leader.Options{TTL: ttl, Retry: p})
	got := make(chan dsync.Leadership, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := follower.Campaign(ctx)
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
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
		if f := s.backend(t).Driver().Capabilities().Fencing; f && lb.Term() <= la.Term() {
			t.Errorf("term %d after term %d", lb.Term(), la.Term())
		}
		if id, err := follower.Leader(ctx); err != nil || id != "b" {
			t.Errorf("Leader = %q, %v; want b", id, err)
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
	if err := s.backend(t).Driver().Release(ctx, name, holdToken(t, l1)); err != nil {
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
		if f := s.backend(t).Driver().Capabilities().Fencing; f && l2.Term() <= l1.Term() {
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
	got := make(chan dsync.Leadership, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := follower.Campaign(ctx)
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
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
		if f := s.backend(t).Driver().Capabilities().Fencing; f && lb.Term() <= la.Term() {
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

// testElectObserve: Leader and Observe report the leader, and the lack of
// one, as terms come and go, to an observer without a candidate ID.
func (s *suite) testElectObserve(t *testing.T) {
	ctx := testutil.Context(t)
	name := testutil.UniqueKey(t)
	opts := &leader.Options{TTL: s.electionTTL(), ObserveInterval: 50 * time.Millisecond}
	obs, err := leader.NewObserver(s.backend(t), name, opts)
	if err != nil {
		t.Fatal(err)
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
	next := func() string {
		t.Helper()
		select {
		case info, ok := <-ch:
			if !ok {
				t.Fatal("Observe's channel closed early")
			}
			return info.ID
		case <-time.After(10 * time.Second):
			t.Fatal("Observe reported no change within 10s")
			return ""
		}
	}
	if id := next(); id != "" {
		t.Fatalf("first state %q, want no leader", id)
	}
	la, err := newElection(t, s.backend(t), name, "a", opts).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id := next(); id != "a" {
		t.Fatalf("Observe sent %q, want a", id)
	}
	if id, err := obs.Leader(ctx); err != nil || id != "a" {
		t.Fatalf("Leader = %q, %v; want a", id, err)
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
	id := next()
	if id == "" {
		id = next()
	}
	if id != "b" {
		t.Fatalf("Observe sent %q after a resigned, want b (or no leader, then b)", id)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if id := next(); id != "" {
		t.Fatalf("Observe sent %q after b resigned, want no leader", id)
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
	d := s.backend(t).Driver()
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

func init() {
	// leader-run: leader.Run on "name" as "id" with "ttl", reporting
	// "leading TERM", a "tick TERM" every "tick" while leading, and
	// "stopped TERM lost|resigned"; until SIGTERM.
	registerWorker("leader-run", func(ctx context.Context, b *dsync.Backend, a workerArgs, emit proc.Emit) error {
		e, err := leader.New(b, a.Str("name"), a.Str("id"), &leader.Options{TTL: a.Duration("ttl")})
		if err != nil {
			return err
		}
		tick := a.Duration("tick")
		err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tk.C:
					emit("tick", strconv.FormatUint(term, 10))
				}
			}
		}, &leader.RunOptions{
			OnStarted: func(term uint64) { emit("leading", strconv.FormatUint(term, 10)) },
			OnStopped: func(term uint64, err error) {
				how := "resigned"
				if errors.Is(err, dsync.ErrLeaseLost) {
					how = "lost"
				}
				emit("stopped", strconv.FormatUint(term, 10), how)
			},
		})
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
}

// fleet is a set of leader-run workers whose events are merged into one
// stream, in the order they arrive, and kept for the final checks.
type fleet struct {
	ws     map[int]*worker // by worker index
	events chan event      // merged; closed when every worker's output has ended
	all    []event         // every event read from events
}

// startFleet starts n leader-run workers on name and returns once they are
// ready.
func (s *suite) startFleet(t *testing.T, name string, n int, ttl time.Duration) *fleet {
	t.Helper()
	f := &fleet{ws: map[int]*worker{}, events: make(chan event, 1024)}
	for i := range n {
		w := s.startWorker(t, "leader-run", map[string]string{
			"name": name, "id": "worker-" + strconv.Itoa(i), "ttl": ttl.String(), "tick": "20ms",
		})
		f.ws[w.Index()] = w
	}
	for _, w := range f.ws {
		w.Expect(t, "ready", 30*time.Second)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range f.ws {
		wg.Add(1)
		go func() { // ends when the worker's output does (its cleanup kills it) or the test does
			defer wg.Done()
			for ev := range w.Events() {
				select {
				case f.events <- ev:
				case <-stop:
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(f.events)
	}()
	t.Cleanup(func() { close(stop) })
	return f
}

// until returns the next event named name, from worker w (nil: any),
// failing the test on a worker's failure or after timeout.
func (f *fleet) until(t *testing.T, name string, w *worker, timeout time.Duration) event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				t.Fatalf("every worker ended before the event %q", name)
			}
			f.all = append(f.all, ev)
			if ev.Name == "fail" {
				t.Fatalf("worker %d failed: %v", ev.Worker, ev.Fields)
			}
			if ev.Name == name && (w == nil || ev.Worker == w.Index()) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event %q within %v", name, timeout)
		}
	}
}

// finish stops the live workers with SIGTERM, reads their last events, and
// checks that they exited cleanly.
func (f *fleet) finish(t *testing.T, dead *worker) {
	t.Helper()
	for _, w := range f.ws {
		if w != dead {
			w.Signal(t, syscall.SIGTERM)
		}
	}
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-f.events:
			if !ok {
				done = true
				break
			}
			f.all = append(f.all, ev)
			if ev.Name == "fail" {
				t.Errorf("worker %d failed: %v", ev.Worker, ev.Fields)
			}
		case <-deadline:
			t.Fatal("workers did not exit within 30s of SIGTERM")
		}
	}
	for _, w := range f.ws {
		if w == dead {
			continue
		}
		<-w.Exited()
		if w.Err() != nil {
			t.Errorf("worker %d: %v; stderr:\n%s", w.Index(), w.Err(), w.Stderr())
		}
	}
	slices.SortFunc(f.all, func(a, b event) int { return int(a.At - b.At) })
}

func termOf(ev event) uint64 {
	term, _ := strconv.ParseUint(ev.Fields[0], 10, 64)
	return term
}

// testElectKilledLeader: a leader process killed with SIGKILL (no
// resignation) is replaced once its hold expires, within the TTL plus the
// retry period, by a leader of a greater term; no process works as leader
// (ticks) on the machine's clock once a later leader has begun.
func (s *suite) testElectKilledLeader(t *testing.T) {
	s.needCrossProcess(t)
	name := testutil.UniqueKey(t)
	ttl := max(s.h.ShortTTL, time.Second)
	retryPeriod := min(ttl/4, leader.DefaultMaxRetryPeriod) // the workers' default
	f := s.startFleet(t, name, 3, ttl)
	first := f.ws[f.until(t, "leading", nil, 30*time.Second).Worker]
	f.until(t, "tick", first, 10*time.Second) // it works as leader
	first.Kill(t)
	killed := monotonic()
	ev := f.until(t, "leading", nil, 3*ttl+10*time.Second)
	failover := ev.At - killed
	second := f.ws[ev.Worker]
	t.Logf("failover %v after the leader was killed (ttl %v, retry period %v)", failover.Round(time.Millisecond), ttl, retryPeriod)
	if bound := ttl + retryPeriod*6/5 + 2*time.Second; failover > bound {
		t.Errorf("failover took %v, above ttl + retry period + 2s = %v", failover, bound)
	}
	f.until(t, "tick", second, 10*time.Second)
	f.finish(t, first)

	// Two processes lead at once when the earlier one works (ticks) after
	// the later one began leading. Its "stopped" event alone may come
	// late on a loaded machine: a leader whose validity ran out stops when
	// it next runs, and its term ended on the server before that, as the
	// new grant shows.
	fencing := s.backend(t).Driver().Capabilities().Fencing
	leading := map[int]uint64{}    // worker -> term, while it leads
	superseded := map[int]uint64{} // worker -> term of the leader that began after it, until it stops
	var maxTerm uint64
	for _, ev := range f.all {
		if ev.Worker == first.Index() && ev.At > killed {
			t.Fatalf("event of the killed worker after its death: %v", ev)
		}
		switch ev.Name {
		case "leading":
			// The killed leader leads until its death; its term ends on
			// the server later, so the failover cannot overlap it.
			if ev.At > killed {
				delete(leading, first.Index())
			}
			for w := range leading {
				superseded[w] = termOf(ev)
			}
			if fencing && termOf(ev) <= maxTerm {
				t.Errorf("term %d after term %d", termOf(ev), maxTerm)
			}
			leading[ev.Worker], maxTerm = termOf(ev), max(maxTerm, termOf(ev))
		case "tick":
			if next, ok := superseded[ev.Worker]; ok {
				t.Errorf("worker %d worked as leader (term %s) after a leader of term %d began", ev.Worker, ev.Fields[0], next)
			}
			if fencing && termOf(ev) != maxTerm {
				t.Errorf("worker %d wrote with term %d after term %d began", ev.Worker, termOf(ev), maxTerm)
			}
		case "stopped":
			delete(leading, ev.Worker)
			delete(superseded, ev.Worker)
		}
	}
}

// testElectPausedLeader: a leader process frozen with SIGSTOP past its TTL
// is replaced by a leader of a greater term; once resumed, the stale leader
// learns of its loss from its own clock, and every write it may make before
// that carries its old term, which a fencing resource rejects.
func (s *suite) testElectPausedLeader(t *testing.T) {
	s.needCrossProcess(t)
	name := testutil.UniqueKey(t)
	ttl := max(s.h.ShortTTL, time.Second)
	f := s.startFleet(t, name, 2, ttl)
	ev := f.until(t, "leading", nil, 30*time.Second)
	paused, term1 := f.ws[ev.Worker], termOf(ev)
	f.until(t, "tick", paused, 10*time.Second)
	paused.Signal(t, syscall.SIGSTOP)
	stoppedAt := monotonic()
	ev = f.until(t, "leading", nil, 3*ttl+10*time.Second)
	term2 := termOf(ev)
	t.Logf("the other candidate led %v after the leader was paused (ttl %v)", (ev.At - stoppedAt).Round(time.Millisecond), ttl)
	fencing := s.backend(t).Driver().Capabilities().Fencing
	if fencing && term2 <= term1 {
		t.Fatalf("term %d after the paused leader's term %d", term2, term1)
	}
	f.until(t, "tick", f.ws[ev.Worker], 10*time.Second) // the new leader writes
	paused.Signal(t, syscall.SIGCONT)
	resumed := monotonic()
	ev = f.until(t, "stopped", paused, 10*time.Second)
	if ev.Fields[1] != "lost" {
		t.Errorf("the paused leader's term ended as %q, want lost", ev.Fields[1])
	}
	t.Logf("the resumed leader knew of its loss %v after SIGCONT", (ev.At - resumed).Round(time.Millisecond))
	f.finish(t, nil)

	// A fencing resource accepts a write only if its term is at least the
	// highest it has seen. The stale leader's writes after the new term's
	// first write must all be rejected; they are counted, not failed: a
	// paused process cannot know, which is why fencing exists.
	var highest uint64
	rejected := 0
	for _, ev := range f.all {
		if ev.Name != "tick" {
			continue
		}
		switch term := termOf(ev); {
		case term >= highest:
			if ev.Worker == paused.Index() && highest > term1 {
				t.Errorf("the stale leader's write with term %d was accepted after term %d", term, highest)
			}
			highest = term
		default:
			if ev.Worker != paused.Index() || term != term1 {
				t.Errorf("worker %d wrote with term %d after term %d", ev.Worker, term, highest)
			}
			rejected++
		}
	}
	if !fencing {
		t.Logf("the backend has no fencing: the %d stale writes could not be told apart", rejected)
		return
	}
	t.Logf("%d stale writes of the resumed leader, all rejected by their term", rejected)
}
