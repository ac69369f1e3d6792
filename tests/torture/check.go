package torture

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Names of the checks.
const (
	CheckExclusion   = "exclusion"         // no more than Size holders valid at once (1 for locks and elections)
	CheckTerms       = "one-per-term"      // no fencing token (term) granted twice
	CheckTokens      = "tokens-grow"       // tokens strictly grow in real-time grant order (linearizability, porcupine)
	CheckLostUpdates = "lost-updates"      // every acknowledged write is in the store, and no rejected one
	CheckStaleWrites = "stale-writes"      // no write of an older hold accepted after a newer hold's write
	CheckLossNoticed = "loss-noticed"      // a holder that outlived its lease learned that it lost it
	CheckUnavailable = "unavailability"    // a grant follows the death of a holder within the bound
	CheckLeftBehind  = "left-behind"       // workers exit cleanly; nothing stays held
	CheckWorkers     = "worker-errors"     // no worker reported an error of its own
	maxDescribed     = 8                   // violations described per check; the rest are counted
	lossSlack        = time.Second         // a holder's own timer may fire this late on a loaded machine
	porcupineTimeout = 20 * time.Second    // bound on the linearizability search
	defaultUnavail   = 2 * time.Second     // Spec.UnavailSlack's default
	checkNote        = "%d more not shown" // suffix of a truncated list
)

// Result is the verdict of one check.
type Result struct {
	Name       string
	Violations []string // empty: the check passed
	// At are the instants of the violations described, where the check
	// has one (exclusion: when one holder too many began), to look up
	// what the servers held then.
	At      []time.Duration
	Notes   []string // measurements and remarks
	Skipped string   // why the check does not apply; empty if it ran
	count   int      // violations found, described or not
	more    int      // the index of the "more not shown" line; 0 if none
}

// OK reports whether the check found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

func (r *Result) violate(format string, args ...any) {
	r.count++
	if r.more == 0 && len(r.Violations) < maxDescribed {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// finish notes how many violations were not described; it may be called
// again after more were found.
func (r *Result) finish() {
	if r.more > 0 {
		r.Violations = r.Violations[:r.more]
		r.more = 0
	}
	if r.count > len(r.Violations) {
		r.more = len(r.Violations)
		r.Violations = append(r.Violations, fmt.Sprintf(checkNote, r.count-len(r.Violations)))
	}
}

// Count is the number of violations found, described or not.
func (r *Result) Count() int { return r.count }

// Spec says what the checks expect of a run.
type Spec struct {
	Prim string // PrimLock, PrimSem, PrimElect or PrimNaive
	Size int    // semaphore size; 0 or 1 for the others
	TTL  time.Duration
	// Fencing says that holds carry fencing tokens (the backend has them
	// and they were not turned off); without it the token checks are
	// skipped.
	Fencing bool
	// UnavailSlack is what the unavailability bound allows above the TTL
	// for the next grant after a holder's death. Default 2s.
	UnavailSlack time.Duration
}

func (s Spec) size() int { return max(s.Size, 1) }

// Check runs every check on a history and the store's accepted writes.
func Check(h *History, store []StoreWrite, members []Member, spec Spec) []*Result {
	return []*Result{
		CheckExclusionOf(h, spec),
		checkTerms(h, spec),
		CheckTokensOf(h, spec),
		checkLostUpdates(h, store),
		CheckStaleWritesOf(h, store, spec),
		checkLossNoticed(h),
		checkUnavailable(h, members, spec),
		checkWorkers(h),
	}
}

func (h *History) describe(ho *Hold) string {
	where := ""
	if p := ho.Place; p != nil {
		where = fmt.Sprintf(", slot %d on masters %s", p.Slot, p.Masters)
	}
	return fmt.Sprintf("%s (token %d%s, valid %s..%s)", ho.ID, ho.Token, where, h.at(ho.Acquired), h.at(ho.End()))
}

// at formats a CLOCK_MONOTONIC instant as seconds since the history's
// first event, with millisecond precision.
func (h *History) at(d time.Duration) string { return fmt.Sprintf("+%.3fs", (d - h.Start).Seconds()) }

// CheckExclusionOf finds moments where more than Size holds were valid at
// once: held by their holders, between their acquisition and the earliest
// of their expiry, the start of their release and their holder's death.
// A holder paused past its expiry is not counted past it.
func CheckExclusionOf(h *History, spec Spec) *Result {
	r := &Result{Name: CheckExclusion}
	type edge struct {
		at    time.Duration
		enter bool
		hold  *Hold
	}
	var edges []edge
	for _, ho := range h.Holds {
		if ho.End() <= ho.Acquired {
			continue // expired before its holder could report it: never relied on
		}
		edges = append(edges, edge{ho.Acquired, true, ho}, edge{ho.End(), false, ho})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		if a.enter == b.enter {
			return 0
		}
		if a.enter {
			return 1 // an end at the same instant comes first
		}
		return -1
	})
	active := map[*Hold]bool{}
	most := 0
	for _, e := range edges {
		if !e.enter {
			delete(active, e.hold)
			continue
		}
		active[e.hold] = true
		most = max(most, len(active))
		if len(active) > spec.size() {
			var who []string
			for o := range active {
				who = append(who, h.describe(o))
			}
			slices.Sort(who)
			if len(r.At) < maxDescribed {
				r.At = append(r.At, e.at)
			}
			r.violate("%d holders valid at %s (limit %d): %v", len(active), h.at(e.at), spec.size(), who)
		}
	}
	r.note("%d holds, at most %d valid at once (limit %d)", len(h.Holds), most, spec.size())
	r.finish()
	return r
}

func checkTerms(h *History, spec Spec) *Result {
	r := &Result{Name: CheckTerms}
	if !spec.Fencing {
		r.Skipped = "no fencing tokens"
		return r
	}
	seen := map[uint64]*Hold{}
	for _, ho := range h.Holds {
		if o, dup := seen[ho.Token]; dup {
			r.violate("token %d granted twice: to %s and %s", ho.Token, h.describe(o), h.describe(ho))
			continue
		}
		seen[ho.Token] = ho
	}
	r.finish()
	return r
}

// grantModel is the fencing counter as porcupine sees it: a register whose
// every grant returns a value strictly greater than the grants linearized
// before it.
var grantModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, _, output any) (bool, any) {
		tok := output.(uint64)
		if tok > state.(uint64) {
			return true, tok
		}
		return false, state
	},
	DescribeOperation: func(_, output any) string { return fmt.Sprintf("grant -> %d", output) },
}

// CheckTokensOf checks that fencing tokens grow in grant order: that the
// history of grants, each from the start of its Acquire to its return, is
// linearizable as a counter whose grants strictly increase (porcupine),
// and names a pair of grants that shows it when not: a grant that
// returned before another began, with a token not below the other's.
func CheckTokensOf(h *History, spec Spec) *Result {
	r := &Result{Name: CheckTokens}
	if !spec.Fencing {
		r.Skipped = "no fencing tokens"
		return r
	}
	var ops []porcupine.Operation
	for _, ho := range h.Holds {
		ops = append(ops, porcupine.Operation{
			ClientId: ho.Worker, Call: int64(ho.Asked), Return: int64(ho.Acquired), Output: ho.Token,
		})
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(grantModel, ops, porcupineTimeout)
	r.note("%d grants, linearizability %s in %v", len(ops), res, time.Since(start).Round(time.Millisecond))
	// The witness: grants by return time; for each grant b (by start
	// time), the largest token returned before b began.
	byReturn := slices.Clone(h.Holds)
	byAsked := slices.Clone(h.Holds)
	slices.SortFunc(byReturn, func(a, b *Hold) int { return cmp.Compare(a.Acquired, b.Acquired) })
	slices.SortFunc(byAsked, func(a, b *Hold) int { return cmp.Compare(a.Asked, b.Asked) })
	var best *Hold
	i := 0
	for _, b := range byAsked {
		for ; i < len(byReturn) && byReturn[i].Acquired < b.Asked; i++ {
			if best == nil || byReturn[i].Token > best.Token {
				best = byReturn[i]
			}
		}
		if best != nil && best.Token >= b.Token {
			r.violate("token %d granted to %s at %s, after token %d was granted to %s at %s",
				b.Token, b.ID, h.at(b.Acquired), best.Token, best.ID, h.at(best.Acquired))
		}
	}
	if res == porcupine.Illegal && r.count == 0 {
		r.violate("the grants are not linearizable as a growing counter")
	}
	if res == porcupine.Unknown {
		r.note("the linearizability search timed out after %v; the pairwise check above still ran", porcupineTimeout)
	}
	r.finish()
	return r
}

type writeRef struct {
	writer string
	seq    int
}

func checkLostUpdates(h *History, store []StoreWrite) *Result {
	r := &Result{Name: CheckLostUpdates}
	inStore := map[writeRef]bool{}
	for _, w := range store {
		inStore[writeRef{w.Writer, w.Seq}] = true
	}
	reported := map[writeRef]string{}
	acked, rejected, unknown := 0, 0, 0
	for _, ho := range h.Holds {
		for _, w := range ho.Writes {
			ref := writeRef{ho.ID, w.Seq}
			reported[ref] = w.Outcome
			switch w.Outcome {
			case "ok":
				acked++
				if !inStore[ref] {
					r.violate("write %d of %s (token %d) was acknowledged at %s but is not in the store", w.Seq, ho.ID, w.Token, h.at(w.At))
				}
			case "rejected":
				rejected++
			default:
				unknown++
			}
		}
	}
	unreported := 0
	for _, w := range store {
		switch reported[writeRef{w.Writer, w.Seq}] {
		case "rejected":
			r.violate("write %d of %s (token %d) is in the store but its writer was told it was rejected", w.Seq, w.Writer, w.Token)
		case "":
			unreported++ // its writer died before reporting it
		}
	}
	r.note("%d writes acknowledged, %d rejected, %d with unknown outcome; %d in the store, %d of them never reported (writer killed)",
		acked, rejected, unknown, len(store), unreported)
	r.finish()
	return r
}

// CheckStaleWritesOf walks the store's accepted writes in the order the
// store accepted them and reports every write of a hold accepted after a
// write of a hold granted later: the write of a stale holder (one paused
// past its lease, or one of two holders at once) that reached the
// resource after its successor's. Fencing exists to make this impossible.
func CheckStaleWritesOf(h *History, store []StoreWrite, spec Spec) *Result {
	r := &Result{Name: CheckStaleWrites}
	if spec.Prim == PrimSem || spec.Prim == PrimNaive {
		r.Skipped = "semaphore holders write side by side"
		return r
	}
	bySeq := map[writeRef]*Hold{}
	type tokRef struct {
		writer string
		token  uint64
	}
	byToken := map[tokRef]*Hold{}
	rejected := 0
	for _, ho := range h.Holds {
		byToken[tokRef{ho.ID, ho.Token}] = ho
		for _, w := range ho.Writes {
			bySeq[writeRef{ho.ID, w.Seq}] = ho
			if w.Outcome == "rejected" {
				rejected++
			}
		}
	}
	var newest *Hold
	unknown := 0
	for _, w := range store {
		ho := bySeq[writeRef{w.Writer, w.Seq}]
		if ho == nil && w.Token != 0 {
			ho = byToken[tokRef{w.Writer, w.Token}]
		}
		if ho == nil {
			unknown++
			continue
		}
		if newest != nil && newest != ho && newest.Acquired > ho.Acquired {
			r.violate("write %d of %s (token %d, lease valid until %s, sent at %s) accepted after a write of %s, granted later",
				w.Seq, w.Writer, w.Token, h.at(ho.End()), h.at(w.Stamp), h.describe(newest))
		}
		if newest == nil || ho.Acquired > newest.Acquired {
			newest = ho
		}
	}
	r.note("%d writes accepted, %d rejected by their fencing token", len(store), rejected)
	if unknown > 0 {
		r.note("%d accepted writes could not be matched to a hold (writer killed before reporting)", unknown)
	}
	r.finish()
	return r
}

// checkLossNoticed: a holder still running past its lease's expiry (by
// more than lossSlack) must have learned that it lost the lease, from the
// lease (Done closed with ErrLeaseLost: a "lost" event) or from its
// release (ErrNotHeld). A release that answered "notheld" while the lease
// had not reported its loss is counted apart: the lease learns of its
// expiry from a timer, which a process continued after a pause may not
// have run yet.
func checkLossNoticed(h *History) *Result {
	r := &Result{Name: CheckLossNoticed}
	byLease, byRelease, vanished := 0, 0, 0
	for _, ho := range h.Holds {
		switch {
		case ho.Died > 0:
			continue
		case ho.Lost > 0:
			byLease++
			continue
		case ho.Outcome == "notheld" && ho.Releasing < ho.Expiry:
			vanished++ // the servers had lost it (a restart without persistence)
			continue
		case ho.Outcome == "notheld":
			byRelease++
			continue
		}
		if ho.Releasing > ho.Expiry+lossSlack || (ho.Releasing == 0 && h.End > ho.Expiry+lossSlack) {
			r.violate("%s held on past its expiry %s without learning that it lost the lease", h.describe(ho), h.at(ho.Expiry))
		}
	}
	r.note("%d holders learned of their loss from the lease, %d only from their release", byLease, byRelease)
	if vanished > 0 {
		r.note("%d releases within the lease found the hold already gone from the servers", vanished)
	}
	r.finish()
	return r
}

func checkUnavailable(h *History, members []Member, spec Spec) *Result {
	r := &Result{Name: CheckUnavailable}
	slack := spec.UnavailSlack
	if slack == 0 {
		slack = defaultUnavail
	}
	bound := spec.TTL + slack
	deaths := 0
	for _, m := range members {
		if m.Died == 0 {
			continue
		}
		var held *Hold
		for _, ho := range h.Holds {
			if ho.Worker == m.Worker && ho.Died > 0 {
				held = ho
			}
		}
		if held == nil {
			continue // it held nothing when it died
		}
		deaths++
		var next *Hold
		for _, ho := range h.Holds {
			if ho.Worker != m.Worker && ho.Acquired > m.Died {
				next = ho
				break
			}
		}
		switch {
		case next != nil:
			gap := next.Acquired - m.Died
			r.note("after %s died holding token %d, %s was granted %v later (bound %v)", m.ID, held.Token, next.ID, gap.Round(time.Millisecond), bound)
			if gap > bound {
				r.violate("%s was granted %v after %s died holding the lock, above ttl + slack = %v", next.ID, gap.Round(time.Millisecond), m.ID, bound)
			}
		case h.End-m.Died > bound:
			r.violate("no grant in the %v after %s died holding the lock (bound %v)", (h.End - m.Died).Round(time.Millisecond), m.ID, bound)
		}
	}
	if deaths == 0 {
		r.Skipped = "no holder died"
	}
	r.finish()
	return r
}

func checkWorkers(h *History) *Result {
	r := &Result{Name: CheckWorkers}
	for _, ev := range h.Failures {
		r.violate("worker %d failed at %s: %v", ev.Worker, h.at(ev.At), ev.Fields)
	}
	r.finish()
	return r
}
