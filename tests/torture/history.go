package torture

import (
	"slices"
	"strconv"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/proc"
)

// Hold is one lease, permit or term as its holder reported it. Times are
// CLOCK_MONOTONIC.
type Hold struct {
	Worker   int    // proc worker index
	ID       string // the worker's ID (its writer name in the store)
	Token    uint64
	Asked    time.Duration // the Acquire (or Campaign) that obtained it began
	Acquired time.Duration // it returned
	// Expiry is the latest expiry the holder reported (at acquisition and
	// with every write: a term is renewed while it lasts).
	Expiry    time.Duration
	Lost      time.Duration // the holder saw the lease lost; 0 if not
	Releasing time.Duration // the holder began to release it; 0 if not
	Released  time.Duration // the release returned; 0 if not
	Outcome   string        // of the release: ok, notheld, err; "" if none
	Died      time.Duration // the worker was killed while holding; 0 if not
	Writes    []Write
	// Place is where a Redlock permit was held right after its grant, as
	// its worker read it from the masters it reaches ("held" event); nil
	// when not reported.
	Place *Place
}

// Place is a Redlock permit's slot and the masters holding it.
type Place struct {
	Slot    int // -1: no master held it when read
	Masters string
	Hold    string // the hold token, as the masters store it
}

// End is when the hold stopped being one the holder may rely on: its
// expiry, or earlier the start of its release or the death of its holder.
func (h *Hold) End() time.Duration {
	end := h.Expiry
	if h.Releasing > 0 && h.Releasing < end {
		end = h.Releasing
	}
	if h.Died > 0 && h.Died < end {
		end = h.Died
	}
	return end
}

// Write is one write to the fenced store as its writer reported it.
type Write struct {
	Seq     int
	Token   uint64
	Start   time.Duration // sent
	At      time.Duration // answered
	Expiry  time.Duration // the writer's lease expiry when answered
	Outcome string        // ok, rejected, err
}

// Unavailable is one Acquire (or Campaign) that failed.
type Unavailable struct {
	Worker int
	Asked  time.Duration
	At     time.Duration
	Class  string // noquorum, quarantined, timeout, notacquired, error
}

// History is what the workers reported, by hold.
type History struct {
	Holds       []*Hold // by Acquired
	Unavailable []Unavailable
	Failures    []proc.Event // "fail" events: a worker's error
	Start, End  time.Duration
}

// Member identifies a worker in a history.
type Member struct {
	Worker int
	ID     string
	Died   time.Duration // when it was killed; 0 if it was not
}

// BuildHistory groups events by hold. Events of each worker must be in the
// order the worker reported them (the order of its output).
func BuildHistory(events []proc.Event, members []Member) *History {
	h := &History{}
	byWorker := map[int][]proc.Event{}
	for _, ev := range events {
		byWorker[ev.Worker] = append(byWorker[ev.Worker], ev)
		if h.Start == 0 || ev.At < h.Start {
			h.Start = ev.At
		}
		h.End = max(h.End, ev.At)
	}
	for _, m := range members {
		var cur *Hold
		var asked time.Duration
		for _, ev := range byWorker[m.Worker] {
			f := ev.Fields
			switch ev.Name {
			case "asked":
				asked = ev.At
			case "acquired":
				if len(f) < 2 {
					continue
				}
				cur = &Hold{Worker: m.Worker, ID: m.ID, Token: u64(f[0]), Asked: asked, Acquired: ev.At, Expiry: dur(f[1])}
				h.Holds = append(h.Holds, cur)
			case "held":
				if cur != nil && len(f) >= 3 {
					slot, _ := strconv.Atoi(f[0])
					cur.Place = &Place{Slot: slot, Masters: f[1], Hold: f[2]}
				}
			case "write":
				if cur == nil || len(f) < 5 {
					continue
				}
				w := Write{Seq: int(u64(f[0])), Token: u64(f[1]), Start: dur(f[2]), At: ev.At, Expiry: dur(f[3]), Outcome: f[4]}
				cur.Writes = append(cur.Writes, w)
				// A renewal moves the expiry forward; a write answered after
				// the expiry reports the old one.
				cur.Expiry = max(cur.Expiry, w.Expiry)
			case "lost": // from a watcher: may come after "releasing", even "released"
				if cur != nil {
					cur.Lost = ev.At
				}
			case "releasing":
				if cur != nil {
					cur.Releasing = ev.At
				}
			case "released":
				if cur != nil {
					cur.Released = ev.At
					if len(f) > 1 {
						cur.Outcome = f[1]
					}
				}
			case "unavailable":
				class := ""
				if len(f) > 0 {
					class = f[0]
				}
				h.Unavailable = append(h.Unavailable, Unavailable{Worker: m.Worker, Asked: asked, At: ev.At, Class: class})
			case "fail":
				h.Failures = append(h.Failures, ev)
			}
		}
		if cur != nil && cur.Released == 0 && m.Died > 0 {
			cur.Died = m.Died
		}
	}
	slices.SortFunc(h.Holds, func(a, b *Hold) int { return int(a.Acquired - b.Acquired) })
	return h
}

func u64(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func dur(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n)
}

// HoldOf returns the hold of worker acquired at acquired, or nil.
func (h *History) HoldOf(worker int, acquired time.Duration) *Hold {
	for _, x := range h.Holds {
		if x.Worker == worker && x.Acquired == acquired {
			return x
		}
	}
	return nil
}
