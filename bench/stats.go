package main

import (
	"math"
	"slices"
)

// Spread is the median, min and max of one measure over the rounds of a
// run.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// spread summarises vs, ignoring NaNs; the zero Spread if none is left.
func spread(vs []float64) Spread {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return Spread{}
	}
	slices.Sort(vs)
	m := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return Spread{Median: m, Min: vs[0], Max: vs[len(vs)-1], N: len(vs)}
}

// CycleSummary summarises a target's lock+unlock cycles over the rounds.
type CycleSummary struct {
	Target     TargetInfo `json:"target"`
	PerSecond  Spread     `json:"cycles_per_second"`
	MeanUs     Spread     `json:"mean_us"`
	P50Us      Spread     `json:"p50_us"`
	P99Us      Spread     `json:"p99_us"`
	VsFloor    Spread     `json:"vs_floor"`     // cost per cycle / the floor's, in the same round
	VsBestPeer Spread     `json:"vs_best_peer"` // cost per cycle / the cheapest peer's of the group, in the same round
	// VsFencedFloor is the cost per cycle over the fenced floor's (a floor
	// that draws a fencing token as cheaply as a server can), in the same
	// round; empty in a group without one.
	VsFencedFloor Spread `json:"vs_fenced_floor"`
	// P50VsFloor is the median cycle's latency over the floor's, in the
	// same round: blind to the cycles a busy machine stretched.
	P50VsFloor Spread `json:"p50_vs_floor"`
	Errors     int    `json:"errors"`
}

// summariseCycles summarises every target with samples in the rounds of
// the scenario pick selects.
func summariseCycles(run *RunResult, pick func(*Round) map[string]CycleSample) []CycleSummary {
	var out []CycleSummary
	for _, t := range run.Targets {
		var rate, mean, p50, p99, vsFloor, vsFenced, vsPeer, p50Floor []float64
		errs := 0
		for i := range run.Rounds {
			m := pick(&run.Rounds[i])
			s, ok := m[t.ID]
			if !ok {
				continue
			}
			rate = append(rate, s.PerSecond())
			mean = append(mean, s.MeanUs)
			p50 = append(p50, s.P50Us)
			p99 = append(p99, s.P99Us)
			errs += s.Errors
			floor, floorP50, fenced, peer := math.NaN(), math.NaN(), math.NaN(), math.NaN()
			for _, o := range run.Targets {
				os, ok := m[o.ID]
				if !ok || o.Group != t.Group {
					continue
				}
				switch o.Role {
				case roleFloor:
					floor, floorP50 = os.MeanUs, os.P50Us
				case roleFencedFloor:
					fenced = os.MeanUs
				case rolePeer:
					if math.IsNaN(peer) || os.MeanUs < peer {
						peer = os.MeanUs
					}
				}
			}
			vsFloor = append(vsFloor, s.MeanUs/floor)
			vsFenced = append(vsFenced, s.MeanUs/fenced)
			vsPeer = append(vsPeer, s.MeanUs/peer)
			p50Floor = append(p50Floor, s.P50Us/floorP50)
		}
		if len(rate) == 0 {
			continue
		}
		out = append(out, CycleSummary{
			Target: t, PerSecond: spread(rate), MeanUs: spread(mean), P50Us: spread(p50), P99Us: spread(p99),
			VsFloor: spread(vsFloor), VsFencedFloor: spread(vsFenced), VsBestPeer: spread(vsPeer), P50VsFloor: spread(p50Floor), Errors: errs,
		})
	}
	return out
}

// ContSummary summarises a target's contention slices over the rounds.
type ContSummary struct {
	Target       TargetInfo `json:"target"`
	PerSecond    Spread     `json:"acquisitions_per_second"`
	Handoffs     Spread     `json:"handoffs_per_second"`
	HandoffP50Us Spread     `json:"handoff_p50_us"`
	HandoffP99Us Spread     `json:"handoff_p99_us"`
	WorstWaitMs  float64    `json:"worst_wait_ms"` // over every round
	// WorstMin and WorstMax are the fewest and most acquisitions of one
	// goroutine in the round where their ratio was lowest; FairRatio is
	// that ratio (1 is an even split, 0 a starved goroutine).
	WorstMin  int     `json:"worst_round_min"`
	WorstMax  int     `json:"worst_round_max"`
	FairRatio float64 `json:"worst_round_min_over_max"`
	// TotalMin and TotalMax are the same over the sum of every round.
	TotalMin  int    `json:"total_min"`
	TotalMax  int    `json:"total_max"`
	VsPeer    Spread `json:"acquisitions_vs_best_peer"` // acquisitions/s / the best default peer's of the group, in the same round
	MaxInside int    `json:"max_inside"`
	GiveUps   int    `json:"give_ups"`
	Violation int    `json:"violations"`
	Errors    int    `json:"errors"`
}

func summariseCont(run *RunResult, pick func(*Round) map[string]ContSample) []ContSummary {
	var out []ContSummary
	for _, t := range run.Targets {
		var rate, hand, p50, p99, vsPeer []float64
		c := ContSummary{Target: t, FairRatio: math.Inf(1)}
		var total []int
		for i := range run.Rounds {
			m := pick(&run.Rounds[i])
			s, ok := m[t.ID]
			if !ok {
				continue
			}
			rate = append(rate, float64(s.Acquisitions)/s.Seconds)
			hand = append(hand, float64(s.Handoffs)/s.Seconds)
			if s.Handoffs > 0 {
				p50 = append(p50, s.HandoffP50Us)
				p99 = append(p99, s.HandoffP99Us)
			}
			c.WorstWaitMs = max(c.WorstWaitMs, s.WorstWaitMs)
			if r := fairness(s.Min(), s.Max()); r < c.FairRatio {
				c.FairRatio, c.WorstMin, c.WorstMax = r, s.Min(), s.Max()
			}
			if total == nil {
				total = make([]int, len(s.PerGoroutine))
			}
			for g, n := range s.PerGoroutine {
				total[g] += n
			}
			c.MaxInside = max(c.MaxInside, s.MaxInside)
			c.GiveUps += s.GiveUps
			c.Violation += s.Violations
			c.Errors += s.Errors
			peer := math.NaN()
			for _, o := range run.Targets {
				os, ok := m[o.ID]
				if ok && o.Group == t.Group && o.Role == rolePeer && o.Variant == "" {
					peer = max(nanToZero(peer), float64(os.Acquisitions)/os.Seconds)
				}
			}
			vsPeer = append(vsPeer, float64(s.Acquisitions)/s.Seconds/peer)
		}
		if len(rate) == 0 {
			continue
		}
		c.PerSecond, c.Handoffs, c.HandoffP50Us, c.HandoffP99Us, c.VsPeer = spread(rate), spread(hand), spread(p50), spread(p99), spread(vsPeer)
		c.TotalMin, c.TotalMax = slices.Min(total), slices.Max(total)
		out = append(out, c)
	}
	return out
}

func fairness(lo, hi int) float64 {
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

func nanToZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// FailoverSummary summarises one backend's leader failovers.
type FailoverSummary struct {
	Group         string  `json:"group"`
	TTLMs         float64 `json:"ttl_ms"`
	FailoverMs    Spread  `json:"failover_ms"`
	AfterExpiryMs Spread  `json:"after_expiry_ms"`
}

func summariseFailover(run *RunResult) []FailoverSummary {
	var out []FailoverSummary
	for _, g := range []string{groupRedis, groupRedlock, groupEtcd} {
		var f, a []float64
		ttl := 0.0
		for _, r := range run.Rounds {
			for _, s := range r.Failover {
				if s.Group == g {
					f, a, ttl = append(f, s.FailoverMs), append(a, s.AfterExpiryMs), s.TTLMs
				}
			}
		}
		if len(f) > 0 {
			out = append(out, FailoverSummary{Group: g, TTLMs: ttl, FailoverMs: spread(f), AfterExpiryMs: spread(a)})
		}
	}
	return out
}
