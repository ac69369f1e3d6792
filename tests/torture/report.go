package torture

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of a run: what the checks found, and what they
// looked at.
type Report struct {
	Title   string // backend and scenario, for the reader
	Spec    Spec
	History *History
	Store   []StoreWrite
	Results []*Result
	Spans   []Span
	Members []Member
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	for _, res := range r.Results {
		if !res.OK() {
			return false
		}
	}
	return true
}

// Result returns the result of the check named name, or nil.
func (r *Report) Result(name string) *Result {
	for _, res := range r.Results {
		if res.Name == name {
			return res
		}
	}
	return nil
}

// Failed lists the names of the checks that found violations.
func (r *Report) Failed() []string {
	var out []string
	for _, res := range r.Results {
		if !res.OK() {
			out = append(out, res.Name)
		}
	}
	return out
}

// Stats are the run's numbers.
type Stats struct {
	Holds, Unavailable             int
	Accepted, Rejected, Unknown    int // writes, as their writers saw them
	LongestGap                     time.Duration
	LongestGapFrom, LongestGapTo   time.Duration
	Duration                       time.Duration
	LostNoticed, KilledWhileHolder int
}

// Stats computes the run's numbers. LongestGap is the longest time with
// no valid hold, from the first grant to the last event (for a lock: the
// worst unavailability the workers saw).
func (r *Report) Stats() Stats {
	var s Stats
	h := r.History
	s.Holds, s.Unavailable, s.Duration = len(h.Holds), len(h.Unavailable), h.End-h.Start
	var covered time.Duration
	for i, ho := range h.Holds {
		for _, w := range ho.Writes {
			switch w.Outcome {
			case "ok":
				s.Accepted++
			case "rejected":
				s.Rejected++
			default:
				s.Unknown++
			}
		}
		if ho.Lost > 0 {
			s.LostNoticed++
		}
		if ho.Died > 0 {
			s.KilledWhileHolder++
		}
		if i > 0 && ho.Acquired-covered > s.LongestGap {
			s.LongestGap, s.LongestGapFrom, s.LongestGapTo = ho.Acquired-covered, covered, ho.Acquired
		}
		covered = max(covered, ho.End())
	}
	if len(h.Holds) > 0 && h.End-covered > s.LongestGap {
		s.LongestGap, s.LongestGapFrom, s.LongestGapTo = h.End-covered, covered, h.End
	}
	return s
}

// WriteText writes the report as text: one line per check, its
// violations and notes, the numbers and the fault timeline.
func (r *Report) WriteText(w io.Writer) {
	if r.Title != "" {
		fmt.Fprintf(w, "== %s ==\n", r.Title)
	}
	for _, res := range r.Results {
		switch {
		case res.Skipped != "":
			fmt.Fprintf(w, "  skip %-15s %s\n", res.Name, res.Skipped)
		case res.OK():
			fmt.Fprintf(w, "  ok   %-15s %s\n", res.Name, strings.Join(res.Notes, "; "))
		default:
			fmt.Fprintf(w, "  FAIL %-15s %d violations\n", res.Name, res.Count())
			for _, v := range res.Violations {
				fmt.Fprintf(w, "         %s\n", v)
			}
			for _, n := range res.Notes {
				fmt.Fprintf(w, "         (%s)\n", n)
			}
		}
	}
	s := r.Stats()
	fmt.Fprintf(w, "  %d holds in %v; writes: %d accepted, %d rejected, %d unknown; %d failed acquisitions; longest time without a holder %v\n",
		s.Holds, s.Duration.Round(time.Millisecond), s.Accepted, s.Rejected, s.Unknown, s.Unavailable, s.LongestGap.Round(time.Millisecond))
	if len(r.Spans) > 0 {
		fmt.Fprintln(w, "  faults:")
		spans := slices.Clone(r.Spans)
		slices.SortFunc(spans, func(a, b Span) int { return int(a.Injected - b.Injected) })
		for _, sp := range spans {
			at := sp.Injected - r.History.Start
			line := fmt.Sprintf("    +%-8v %s", at.Round(time.Millisecond), sp.Name())
			if took := sp.Injected - sp.Began; sp.Began > 0 && took >= 10*time.Millisecond {
				line += fmt.Sprintf(" (injecting took %v)", took.Round(time.Millisecond))
			}
			switch {
			case sp.Healed == 0:
				line += " (never healed)"
			case sp.Healed > sp.Injected:
				line += fmt.Sprintf(" for %v", (sp.Healed - sp.Injected).Round(time.Millisecond))
			}
			if sp.Err != nil {
				line += fmt.Sprintf(" [error: %v]", sp.Err)
			}
			fmt.Fprintln(w, line)
		}
	}
}
