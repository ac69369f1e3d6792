package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// compareCmd sets the runs of two builds side by side: for every dsync
// target, its cycle cost over the floors (and the best peer) of its own
// round, and its contention figures, pooled over the rounds of each
// build's runs. Ratios taken within a round cancel the machine's noise, so
// builds measured in alternating runs compare like for like.
func compareCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	oldRuns := fs.String("old", "", "comma-separated runs (JSON from bench run) of the old build")
	newRuns := fs.String("new", "", "comma-separated runs of the new build")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *oldRuns == "" || *newRuns == "" {
		return fmt.Errorf("compare needs -old and -new")
	}
	o, err := pooled(*oldRuns)
	if err != nil {
		return err
	}
	n, err := pooled(*newRuns)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "old: %s (%d rounds)\nnew: %s (%d rounds)\n\n", o.Machine.Commit, len(o.Rounds), n.Machine.Commit, len(n.Rounds))
	fmt.Fprintln(w, "| scenario | target | old vs floor | new vs floor | old vs fenced floor | new vs fenced floor | old vs best peer | new vs best peer |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, sc := range []struct {
		name string
		pick func(*Round) map[string]CycleSample
	}{{"uncontended", func(r *Round) map[string]CycleSample { return r.Uncontended }}, {"throughput", func(r *Round) map[string]CycleSample { return r.Throughput }}} {
		olds := summariseCycles(o, sc.pick)
		for _, nc := range summariseCycles(n, sc.pick) {
			if nc.Target.Role != roleDsync {
				continue
			}
			oc := find(olds, cycTarget, nc.Target.Group, labelOf(nc.Target))
			if oc == nil {
				continue
			}
			fmt.Fprintf(w, "| %s | %s %s | %s | %s | %s | %s | %s | %s |\n", sc.name, nc.Target.Group, labelOf(nc.Target),
				ratio(oc.VsFloor), ratio(nc.VsFloor), ratio(oc.VsFencedFloor), ratio(nc.VsFencedFloor), ratio(oc.VsBestPeer), ratio(nc.VsBestPeer))
		}
	}
	fmt.Fprintln(w, "\n| target | old acquisitions/s | new acquisitions/s | old fewest/most | new fewest/most | old worst wait | new worst wait |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	pick := func(r *Round) map[string]ContSample { return r.Contention }
	olds := summariseCont(o, pick)
	for _, nc := range summariseCont(n, pick) {
		if nc.Target.Role != roleDsync {
			continue
		}
		oc := find(olds, conTarget, nc.Target.Group, labelOf(nc.Target))
		if oc == nil {
			continue
		}
		fmt.Fprintf(w, "| %s %s | %.0f | %.0f | %d/%d | %d/%d | %.1f ms | %.1f ms |\n", nc.Target.Group, labelOf(nc.Target),
			oc.PerSecond.Median, nc.PerSecond.Median, oc.WorstMin, oc.WorstMax, nc.WorstMin, nc.WorstMax, oc.WorstWaitMs, nc.WorstWaitMs)
	}
	return nil
}

func ratio(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", s.Median, s.Min, s.Max)
}

// pooled reads runs of one build and pools their rounds; the targets and
// machine are the first run's.
func pooled(paths string) (*RunResult, error) {
	var out *RunResult
	for _, p := range strings.Split(paths, ",") {
		r, err := readRun(p)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = r
			continue
		}
		out.Rounds = append(out.Rounds, r.Rounds...)
	}
	return out, nil
}
