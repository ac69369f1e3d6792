package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Summary is what report writes to latest.json: the summaries of the
// tables, the checks against the targets, and both runs' samples.
type Summary struct {
	Generated         string            `json:"generated"`
	Machine           Machine           `json:"machine"`
	PinnedMachine     *Machine          `json:"pinned_machine,omitempty"`
	Config            Config            `json:"config"`
	PinnedConfig      *Config           `json:"pinned_config,omitempty"`
	UncontendedPinned []CycleSummary    `json:"uncontended_pinned,omitempty"`
	Uncontended       []CycleSummary    `json:"uncontended"`
	Throughput        []CycleSummary    `json:"throughput"`
	Contention        []ContSummary     `json:"contention"`
	SemFree           []SemFreeSummary  `json:"semaphore_free"`
	SemPool           []ContSummary     `json:"semaphore_pool"`
	Failover          []FailoverSummary `json:"failover"`
	Checks            []Check           `json:"checks"`
	Errors            map[string]string `json:"errors,omitempty"`
	// Runs are the samples of both runs, per round (compact JSON).
	Runs []json.RawMessage `json:"runs"`

	full *RunResult // the run on every CPU
}

// SemFreeSummary is a free permit's acquire+release, and its cost relative
// to a lock+unlock of the same backend in the same round.
type SemFreeSummary struct {
	CycleSummary
	VsLock Spread `json:"vs_lock"`
}

// Check is one of the guard rails (DESIGN.md, "Speed is measured") and what
// this run measured against it.
type Check struct {
	What     string `json:"what"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	full := fs.String("full", "", "samples of the run on every CPU (JSON from bench run)")
	pinned := fs.String("pinned", "", "samples of the uncontended run pinned to one CPU (optional)")
	dir := fs.String("dir", "results", "directory to write latest.md, latest.json and contention.png to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *full == "" {
		return fmt.Errorf("report needs -full")
	}
	fr, err := readRun(*full)
	if err != nil {
		return err
	}
	var pr *RunResult
	if *pinned != "" {
		if pr, err = readRun(*pinned); err != nil {
			return err
		}
	}
	sum, err := summarise(fr, pr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(*dir, "latest.json"), sum); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "latest.md"), []byte(markdown(sum)), 0o644); err != nil {
		return err
	}
	return plotContention(sum, filepath.Join(*dir, "contention.png"))
}

func readRun(path string) (*RunResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r RunResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func summarise(fr, pr *RunResult) (*Summary, error) {
	s := &Summary{
		Generated: time.Now().UTC().Format(time.RFC3339),
		Machine:   fr.Machine, Config: fr.Config,
		Uncontended: summariseCycles(fr, func(r *Round) map[string]CycleSample { return r.Uncontended }),
		Throughput:  summariseCycles(fr, func(r *Round) map[string]CycleSample { return r.Throughput }),
		Contention:  summariseCont(fr, func(r *Round) map[string]ContSample { return r.Contention }),
		SemPool:     summariseCont(fr, func(r *Round) map[string]ContSample { return r.SemPool }),
		Failover:    summariseFailover(fr),
		Errors:      maps.Clone(fr.Errors),
		full:        fr,
	}
	for _, c := range summariseCycles(fr, func(r *Round) map[string]CycleSample { return r.SemFree }) {
		var vs []float64
		for _, r := range fr.Rounds {
			sem, ok := r.SemFree[c.Target.ID]
			lock, ok2 := r.Uncontended[c.Target.Group+" / dsync"]
			if ok && ok2 {
				vs = append(vs, sem.MeanUs/lock.MeanUs)
			}
		}
		s.SemFree = append(s.SemFree, SemFreeSummary{CycleSummary: c, VsLock: spread(vs)})
	}
	if pr != nil {
		s.PinnedMachine, s.PinnedConfig = &pr.Machine, &pr.Config
		s.UncontendedPinned = summariseCycles(pr, func(r *Round) map[string]CycleSample { return r.Uncontended })
		for k, v := range pr.Errors {
			if s.Errors == nil {
				s.Errors = map[string]string{}
			}
			s.Errors["pinned: "+k] = v
		}
	}
	s.Checks = checks(s)
	for _, r := range []*RunResult{fr, pr} {
		if r != nil {
			b, err := json.Marshal(r)
			if err != nil {
				return nil, err
			}
			s.Runs = append(s.Runs, b)
		}
	}
	return s, nil
}

// find returns the summary of the target of group and label, or nil.
func find[T any](list []T, target func(T) TargetInfo, group, label string) *T {
	for i := range list {
		t := target(list[i])
		if t.Group == group && labelOf(t) == label {
			return &list[i]
		}
	}
	return nil
}

func labelOf(t TargetInfo) string {
	if t.Variant == "" {
		return t.Name
	}
	return t.Name + " (" + t.Variant + ")"
}

func cycTarget(c CycleSummary) TargetInfo { return c.Target }
func conTarget(c ContSummary) TargetInfo  { return c.Target }

// checks compares the summaries with the guard rails. Per-operation cost
// is judged on the pinned run when there is one.
func checks(s *Summary) []Check {
	var out []Check
	unc, where := s.UncontendedPinned, "pinned to one CPU"
	if unc == nil {
		unc, where = s.Uncontended, "2 cores (no pinned run)"
	}
	for _, c := range []struct {
		group, floor string
		goal         float64
		peer         string
	}{
		{groupRedis, "raw SET NX PX + compare-and-delete", 1.15, "about 1.2x"},
		{groupRedlock, "raw parallel fan-out", 1.10, "about 1.18x"},
	} {
		d := find(unc, cycTarget, c.group, "dsync")
		nf := find(unc, cycTarget, c.group, "dsync (no fencing)")
		try := find(unc, cycTarget, c.group, "dsync ("+variantTry+")")
		tryNF := find(unc, cycTarget, c.group, "dsync ("+variantTryNoFence+")")
		if d == nil {
			continue
		}
		best, bestName, bestP50 := math.Inf(1), "", 0.0
		for _, x := range unc {
			if x.Target.Group == c.group && x.Target.Role == rolePeer && x.VsFloor.Median < best {
				best, bestName, bestP50 = x.VsFloor.Median, x.Target.Name, x.P50VsFloor.Median
			}
		}
		m := fmt.Sprintf("dsync %s", fmtSpread(d.VsFloor, "x"))
		if nf != nil {
			m += fmt.Sprintf("; without fencing %s", fmtSpread(nf.VsFloor, "x"))
		}
		if try != nil {
			m += fmt.Sprintf("; TryAcquire (one attempt, no release subscription) %s", fmtSpread(try.VsFloor, "x"))
		}
		if tryNF != nil {
			m += fmt.Sprintf("; TryAcquire without fencing (what the floor does) %s", fmtSpread(tryNF.VsFloor, "x"))
		}
		m += fmt.Sprintf(". Median cycle (p50) over the floor's: dsync %.2fx", d.P50VsFloor.Median)
		if tryNF != nil {
			m += fmt.Sprintf(", TryAcquire without fencing %.2fx", tryNF.P50VsFloor.Median)
		}
		if bestName != "" {
			m += fmt.Sprintf(", %s %.2fx", bestName, bestP50)
		}
		if bestName != "" {
			m += fmt.Sprintf("; best peer (%s) %.2fx", bestName, best)
		}
		out = append(out, Check{
			What:     fmt.Sprintf("%s lock+unlock vs the %s, %s", c.group, c.floor, where),
			Goal:     fmt.Sprintf("within %.2fx (best peer %s)", c.goal, c.peer),
			Measured: m, Met: d.VsFloor.Median <= c.goal,
		})
		if d.VsFencedFloor.N > 0 {
			// dsync's default draws a fencing token, which the floor and
			// the peers do not: the same check against a floor that
			// draws one as cheaply as the server can.
			out = append(out, Check{
				What:     fmt.Sprintf("the same with fencing, vs a floor that fences too (INCR of one counter in the SET script), %s", where),
				Goal:     fmt.Sprintf("within %.2fx", c.goal),
				Measured: fmt.Sprintf("dsync %s", fmtSpread(d.VsFencedFloor, "x")),
				Met:      d.VsFencedFloor.Median <= c.goal,
			})
		}
		if nf != nil {
			// The floor and the peers take no fencing token: the same
			// check for dsync doing what they do.
			out = append(out, Check{
				What:     fmt.Sprintf("the same without fencing (neither the floor nor the peers fence), %s", where),
				Goal:     fmt.Sprintf("within %.2fx", c.goal),
				Measured: fmt.Sprintf("dsync (no fencing) %s", fmtSpread(nf.VsFloor, "x")),
				Met:      nf.VsFloor.Median <= c.goal,
			})
		}
	}
	if d := find(s.Contention, conTarget, groupEtcd, "dsync"); d != nil {
		out = append(out, Check{
			What: "etcd contended acquisitions/s vs concurrency.Mutex", Goal: "at least 10x",
			Measured: fmtSpread(d.VsPeer, "x"), Met: d.VsPeer.Median >= 10,
		})
	}
	for _, c := range s.Contention {
		if c.Target.Role != roleDsync {
			continue
		}
		what := fmt.Sprintf("%s, %s, %d goroutines on one key", c.Target.Group, labelOf(c.Target), s.Config.Contenders)
		if c.Target.Variant != "" {
			// The scenario is goroutines of one process, each
			// library on its shipped client; separate clients are ours.
			what += " (beyond the issue's scenario)"
		}
		out = append(out, Check{
			What: what, Goal: "no goroutine starved (min >= max/2 in every round), worst wait < 100 ms",
			Measured: fmt.Sprintf("worst round %d/%d, worst wait %.1f ms", c.WorstMin, c.WorstMax, c.WorstWaitMs),
			Met:      c.FairRatio >= 0.5 && c.WorstWaitMs < 100,
		})
	}
	return out
}

func fmtSpread(s Spread, unit string) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%s (%.2f-%.2f)", s.Median, unit, s.Min, s.Max)
}

func fmtUs(us float64) string {
	switch {
	case us == 0:
		return "-"
	case us >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	default:
		return fmt.Sprintf("%.0f µs", us)
	}
}

func fmtRate(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", s.Median)
}

func markdown(s *Summary) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := s.Machine
	p("# dsync next to its Go peers\n\n")
	p("Generated %s by `bench/run.sh`. Machine: %s, %d CPUs, Linux %s, %s, redis-server %s, etcd %s", s.Generated, m.CPU, m.CPUs, m.Kernel, m.Go, m.Redis, m.Etcd)
	if m.Commit != "" {
		p(", dsync %s", m.Commit)
	}
	p(". Load average (1, 5, 15 min) before and after the 2-core run: %s / %s", m.LoadBefore, m.LoadAfter)
	if s.PinnedMachine != nil {
		p("; the pinned run: %s / %s", s.PinnedMachine.LoadBefore, s.PinnedMachine.LoadAfter)
	}
	p(".\n\n")
	c := s.Config
	p("Every target runs in every round, one slice each (%v; %v for contention and the semaphore pool), in an order rotated every round, so that all see the same machine noise; the uncontended scenario runs the targets of one group of servers interleaved, one cycle each in turn. "+
		"%d rounds; ratios are taken within a round and shown as the median (min-max) over rounds. "+
		"Lock TTL %v for every library; redsync with its shipped retry (32 tries, 50-250 ms apart), redislock with the retry of its documentation's example (every 100 ms; its shipped default is a single attempt), dsync with its defaults (jittered exponential 10-200 ms, woken by release notices), etcd's Mutex as shipped. "+
		"The floors are go-redis `SET NX PX` plus a compare-and-delete script, on 1 instance, and fanned out in parallel to 5 (waiting for all 5 replies). The fenced floors draw a fencing token as cheaply as a server can: `SET NX PX` and `INCR` of one counter for every key in one script, the token being the largest counter of the replies (one goroutine's cycles reach the 5 in the same order, so their counters agree and need no write-back).\n\n",
		time.Duration(c.Slice), time.Duration(c.ContSlice), c.Rounds, time.Duration(c.LockTTL))

	p("## Against the targets\n\n| target | goal | measured | met |\n|---|---|---|---|\n")
	for _, ch := range s.Checks {
		met := "no"
		if ch.Met {
			met = "yes"
		}
		p("| %s | %s | %s | %s |\n", ch.What, ch.Goal, ch.Measured, met)
	}

	cycles := func(title, note string, list []CycleSummary) {
		if len(list) == 0 {
			return
		}
		p("\n## %s\n\n%s\n\n| servers | library | cycles/s | p50 | p99 | cost vs floor | p50 vs floor | cost vs best peer | errors |\n|---|---|---|---|---|---|---|---|---|\n", title, note)
		for _, x := range list {
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.Target.Group, labelOf(x.Target), fmtRate(x.PerSecond),
				fmtUs(x.P50Us.Median), fmtUs(x.P99Us.Median), fmtSpread(x.VsFloor, "x"), fmtSpread(x.P50VsFloor, "x"), fmtSpread(x.VsBestPeer, "x"), x.Errors)
		}
	}
	if pc := s.PinnedConfig; pc != nil {
		cycles("Uncontended, pinned to one CPU (compare per-operation cost here)",
			fmt.Sprintf("One goroutine, a fresh key per cycle, lock+unlock; the bench program, its redis-servers and the embedded etcd all on CPU 0 (`taskset -c 0`); a run of its own, %d rounds; in each, the targets of one group of servers run interleaved, one cycle each in turn, for %v per target, so that all meet the same noise. "+
				"Cost = mean time per cycle; 1.10x means 10%% slower than the floor (or the cheapest peer of the same servers) in the same round.", pc.Rounds, time.Duration(pc.Slice)),
			s.UncontendedPinned)
	}
	cycles("Uncontended, 2 cores",
		"The same on both CPUs: client and servers land on either CPU, so single-operation latency depends on placement; for reference only.",
		s.Uncontended)
	cycles(fmt.Sprintf("Throughput, %d goroutines", c.Goroutines),
		"Each goroutine locks and unlocks a key of its own. Cost = mean time per cycle per goroutine.",
		s.Throughput)

	if len(s.Contention) > 0 {
		p("\n## Contention: %d goroutines on one key, %v of busy work inside\n\n", c.Contenders, time.Duration(c.Work))
		p("Handoff: the lock passing to another goroutine, timed from the holder leaving the critical section to the next one's lock call returning. Fairness: fewest/most acquisitions of one goroutine in the least even round (equal numbers are an even split; 0 is a starved goroutine). Worst wait: the longest any lock call waited in any round, a wait still pending at a slice's end counted up to the end (so at most %v). \"8 clients\": every goroutine has its own dsync backend (connections, no in-process queue), as separate processes would. Give-ups: redsync returning after its 32 tries (asked again). vs best peer: acquisitions/s over those of the group's best peer with shipped settings, same round.\n\n",
			time.Duration(c.ContSlice))
		p("| servers | library | acquisitions/s | handoffs/s | handoff p50 | handoff p99 | worst wait | fairness (worst round) | vs best peer | give-ups | violations |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range s.Contention {
			p("| %s | %s | %s | %s | %s | %s | %.1f ms | %d/%d | %s | %d | %d |\n", x.Target.Group, labelOf(x.Target), fmtRate(x.PerSecond), fmtRate(x.Handoffs),
				fmtUs(x.HandoffP50Us.Median), fmtUs(x.HandoffP99Us.Median), x.WorstWaitMs, x.WorstMin, x.WorstMax, fmtSpread(x.VsPeer, "x"), x.GiveUps, x.Violation)
		}
		p("\n![handoff latency and fairness under contention](contention.png)\n")
	}

	if len(s.SemFree) > 0 || len(s.SemPool) > 0 {
		p("\n## Semaphores (dsync only: no Go peer offers them on all three)\n\n")
		p("Free permit: one goroutine takes and gives back a permit of a semaphore of %d; vs lock = its cost over the same backend's uncontended lock+unlock, same round. Pool: %d goroutines share %d permits, each holding one for %v (asleep, as a holder waiting on I/O: more busy holders than CPUs would measure the scheduler).\n\n",
			c.SemFreeSize, c.SemPoolWorkers, c.SemPoolSize, time.Duration(c.SemPoolWork))
		p("| servers | free permit cycles/s | p50 | p99 | vs lock | pool acquisitions/s | pool worst wait | pool fairness (worst round) | most holders at once | violations |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, g := range []string{groupRedis, groupRedlock, groupEtcd} {
			row := []string{g, "-", "-", "-", "-", "-", "-", "-", "-", "-"}
			for _, x := range s.SemFree {
				if x.Target.Group == g {
					row[1], row[2], row[3], row[4] = fmtRate(x.PerSecond), fmtUs(x.P50Us.Median), fmtUs(x.P99Us.Median), fmtSpread(x.VsLock, "x")
				}
			}
			for _, x := range s.SemPool {
				if x.Target.Group == g {
					row[5], row[6], row[7], row[8], row[9] = fmtRate(x.PerSecond), fmt.Sprintf("%.1f ms", x.WorstWaitMs),
						fmt.Sprintf("%d/%d", x.WorstMin, x.WorstMax), fmt.Sprint(x.MaxInside), fmt.Sprint(x.Violation)
				}
			}
			p("| %s |\n", strings.Join(row, " | "))
		}
	}

	if len(s.Failover) > 0 {
		p("\n## Leader failover (dsync's leader package)\n\n")
		p("Two candidates, each on a backend of its own; the leader's backend is closed at a random moment of its term (no renewal, no resignation), and the time until the other candidate leads is measured; one trial per backend per round. After expiry: from the crashed leader's local lease expiry (last renewal + TTL - drift allowance) to the takeover.\n\n")
		p("| servers | TTL | failover | after expiry |\n|---|---|---|---|\n")
		for _, f := range s.Failover {
			p("| %s | %.0f ms | %s | %s |\n", f.Group, f.TTLMs, fmtSpread(f.FailoverMs, " ms"), fmtSpread(f.AfterExpiryMs, " ms"))
		}
	}

	if len(s.Errors) > 0 {
		p("\n## Dropped from the run\n\n")
		for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
			p("- %s: %s\n", k, s.Errors[k])
		}
	}
	return b.String()
}
