package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/proc"
)

// The checkers on made-up histories: each must find the violation it
// exists for, and pass the same history without it. A checker that cannot
// fail proves nothing.

const s = time.Second

// ev builds one event; times are in milliseconds.
func ev(worker int, atMs int, name string, fields ...string) proc.Event {
	return proc.Event{Worker: worker, Name: name, At: time.Duration(atMs) * time.Millisecond, Fields: fields}
}

func msStamp(m int) string { return stamp(time.Duration(m) * time.Millisecond) }

// holdEvents is one hold of a worker: asked at a, granted at g with token
// tok valid until exp, one write at w (outcome), released at r.
func holdEvents(worker, a, g int, tok string, exp, w int, outcome string, seq string, r int) []proc.Event {
	evs := []proc.Event{
		ev(worker, a, "asked"),
		ev(worker, g, "acquired", tok, msStamp(exp)),
	}
	if w > 0 {
		evs = append(evs, ev(worker, w+1, "write", seq, tok, msStamp(w), msStamp(exp), outcome))
	}
	if r > 0 {
		evs = append(evs, ev(worker, r, "releasing", tok), ev(worker, r+1, "released", tok, "ok"))
	}
	return evs
}

var twoMembers = []Member{{Worker: 0, ID: "a"}, {Worker: 1, ID: "b"}}

func lockSpec1s() Spec { return Spec{Prim: PrimLock, TTL: s, Fencing: true} }

func concat(lists ...[]proc.Event) []proc.Event {
	var out []proc.Event
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func TestCheckExclusion(t *testing.T) {
	good := BuildHistory(concat(
		holdEvents(0, 0, 10, "1", 1000, 0, "", "", 100),
		holdEvents(1, 5, 110, "2", 1100, 0, "", "", 200),
	), twoMembers)
	if r := CheckExclusionOf(good, lockSpec1s()); !r.OK() {
		t.Errorf("sequential holds: %v", r.Violations)
	}
	bad := BuildHistory(concat(
		holdEvents(0, 0, 10, "1", 1000, 0, "", "", 100),
		holdEvents(1, 5, 50, "2", 1050, 0, "", "", 200),
	), twoMembers)
	if r := CheckExclusionOf(bad, lockSpec1s()); r.OK() {
		t.Error("overlapping holds passed")
	} else if len(r.At) != 1 || r.At[0] != 50*time.Millisecond {
		t.Errorf("the violation's instants %v, want [50ms]: when the second holder began", r.At)
	}
	// A Redlock permit's place ("held") is in the description.
	placed := BuildHistory(concat(
		holdEvents(0, 0, 10, "1", 1000, 0, "", "", 100),
		[]proc.Event{ev(1, 5, "asked"), ev(1, 50, "acquired", "2", msStamp(1050)), ev(1, 51, "held", "0", "2,3,4", "secret")},
	), twoMembers)
	if r := CheckExclusionOf(placed, lockSpec1s()); r.OK() || !strings.Contains(r.Violations[0], "b (token 2, slot 0 on masters 2,3,4,") {
		t.Errorf("a violation by a placed permit: %v, want its slot and masters named", r.Violations)
	}
	// A semaphore of 2 admits both.
	if r := CheckExclusionOf(bad, Spec{Prim: PrimSem, Size: 2}); !r.OK() {
		t.Errorf("two holders of a semaphore of 2: %v", r.Violations)
	}
	// A holder paused past its expiry (released late) does not overlap
	// its successor.
	paused := BuildHistory(concat(
		holdEvents(0, 0, 10, "1", 1000, 0, "", "", 3000),
		holdEvents(1, 5, 1010, "2", 2010, 0, "", "", 1500),
	), twoMembers)
	if r := CheckExclusionOf(paused, lockSpec1s()); !r.OK() {
		t.Errorf("a holder past its expiry counted: %v", r.Violations)
	}
}

func TestCheckTokens(t *testing.T) {
	good := BuildHistory(concat(
		holdEvents(0, 0, 10, "5", 1000, 0, "", "", 100),
		holdEvents(1, 5, 110, "7", 1100, 0, "", "", 200),
	), twoMembers)
	if r := CheckTokensOf(good, lockSpec1s()); !r.OK() {
		t.Errorf("growing tokens: %v", r.Violations)
	}
	// b asked after a was granted, and got a smaller token.
	bad := BuildHistory(concat(
		holdEvents(0, 0, 10, "5", 1000, 0, "", "", 100),
		holdEvents(1, 50, 110, "4", 1100, 0, "", "", 200),
	), twoMembers)
	r := CheckTokensOf(bad, lockSpec1s())
	if r.OK() || !strings.Contains(strings.Join(r.Notes, " "), "Illegal") {
		t.Errorf("a shrinking token passed: %v %v", r.Violations, r.Notes)
	}
	// Concurrent grants may be linearized either way.
	concurrent := BuildHistory(concat(
		holdEvents(0, 0, 100, "5", 1000, 0, "", "", 150),
		holdEvents(1, 50, 200, "4", 1100, 0, "", "", 300),
	), twoMembers)
	if r := CheckTokensOf(concurrent, lockSpec1s()); !r.OK() {
		t.Errorf("overlapping grant calls: %v", r.Violations)
	}
	dup := BuildHistory(concat(
		holdEvents(0, 0, 10, "5", 1000, 0, "", "", 100),
		holdEvents(1, 50, 110, "5", 1100, 0, "", "", 200),
	), twoMembers)
	if r := checkTerms(dup, lockSpec1s()); r.OK() {
		t.Error("a token granted twice passed")
	}
}

func TestCheckWrites(t *testing.T) {
	evs := concat(
		holdEvents(0, 0, 10, "1", 1000, 50, "ok", "1", 100),
		holdEvents(1, 5, 110, "2", 1100, 150, "ok", "1", 200),
	)
	h := BuildHistory(evs, twoMembers)
	inOrder := []StoreWrite{{Writer: "a", Seq: 1, Token: 1}, {Writer: "b", Seq: 1, Token: 2}}
	if r := checkLostUpdates(h, inOrder); !r.OK() {
		t.Errorf("complete store: %v", r.Violations)
	}
	if r := checkLostUpdates(h, inOrder[:1]); r.OK() {
		t.Error("an acknowledged write missing from the store passed")
	}
	if r := CheckStaleWritesOf(h, inOrder, lockSpec1s()); !r.OK() {
		t.Errorf("writes in grant order: %v", r.Violations)
	}
	reversed := []StoreWrite{inOrder[1], inOrder[0]}
	if r := CheckStaleWritesOf(h, reversed, lockSpec1s()); r.OK() {
		t.Error("an older hold's write after a newer one's passed")
	}
	rejected := BuildHistory(concat(
		holdEvents(0, 0, 10, "1", 1000, 50, "rejected", "1", 100),
	), twoMembers)
	if r := checkLostUpdates(rejected, inOrder[:1]); r.OK() {
		t.Error("a write in the store that its writer saw rejected passed")
	}
}

func TestCheckLossNoticed(t *testing.T) {
	late := holdEvents(0, 0, 10, "1", 1000, 0, "", "", 3000)
	if r := checkLossNoticed(BuildHistory(late, twoMembers)); r.OK() {
		t.Error("a holder that released long after its expiry without a loss passed")
	}
	noticed := append(late, ev(0, 1001, "lost", "1"))
	if r := checkLossNoticed(BuildHistory(noticed, twoMembers)); !r.OK() {
		t.Errorf("a holder that saw its loss: %v", r.Violations)
	}
}

func TestCheckUnavailable(t *testing.T) {
	members := []Member{{Worker: 0, ID: "a", Died: 20 * time.Millisecond}, {Worker: 1, ID: "b"}}
	spec := Spec{Prim: PrimLock, TTL: s, UnavailSlack: 500 * time.Millisecond}
	soon := concat(holdEvents(0, 0, 10, "1", 1010, 0, "", "", 0), holdEvents(1, 5, 1100, "2", 2100, 0, "", "", 1200))
	if r := checkUnavailable(BuildHistory(soon, members), members, spec); !r.OK() || r.Skipped != "" {
		t.Errorf("a grant 1.08s after the death: %v %s", r.Violations, r.Skipped)
	}
	late := concat(holdEvents(0, 0, 10, "1", 1010, 0, "", "", 0), holdEvents(1, 5, 1600, "2", 2600, 0, "", "", 1700))
	if r := checkUnavailable(BuildHistory(late, members), members, spec); r.OK() {
		t.Error("a grant 1.58s after the death passed a bound of 1.5s")
	}
	failed := []proc.Event{ev(1, 5, "fail", "boom")}
	if r := checkWorkers(BuildHistory(failed, members)); r.OK() {
		t.Error("a worker's failure passed")
	}
}
