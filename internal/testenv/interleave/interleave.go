// Package interleave measures variants of a benchmark side by side: every
// iteration runs each variant once, so that all of them see the same
// machine noise, and rotates which one goes first, so that none always
// follows the same neighbour (on a loopback server, a cycle that follows
// another one is measurably faster, by up to 15%, whichever it is). For
// tests only.
package interleave

import (
	"slices"
	"testing"
	"time"
)

// Case is one variant.
type Case struct {
	Name string
	Run  func()
}

// Options tune Run. The zero value is usable.
type Options struct {
	// Warm is how many untimed rounds of every case run first. Default 200.
	Warm int
	// Between, if set, runs untimed before every round (housekeeping, such
	// as refreshing holds that outlive the benchmark).
	Between func()
}

// Result is one case's measurements.
type Result struct {
	Total  time.Duration
	Median time.Duration
	N      int
}

// Mean is the mean time of one run of the case.
func (r Result) Mean() time.Duration { return r.Total / time.Duration(max(r.N, 1)) }

// Run warms the cases, then runs every case once per iteration of b.Loop,
// starting each round one case further along. It reports each case's mean
// as NAME-ns/cycle and returns the results by case name.
func Run(b *testing.B, opts *Options, cases ...Case) map[string]Result {
	b.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Warm == 0 {
		o.Warm = 200
	}
	for range o.Warm {
		if o.Between != nil {
			o.Between()
		}
		for _, c := range cases {
			c.Run()
		}
	}
	samples := make([][]time.Duration, len(cases))
	first := 0
	for b.Loop() {
		if o.Between != nil {
			b.StopTimer()
			o.Between()
			b.StartTimer()
		}
		for k := range cases {
			i := (first + k) % len(cases)
			t0 := time.Now()
			cases[i].Run()
			samples[i] = append(samples[i], time.Since(t0))
		}
		first = (first + 1) % len(cases)
	}
	out := make(map[string]Result, len(cases))
	for i, c := range cases {
		r := Result{N: len(samples[i])}
		for _, d := range samples[i] {
			r.Total += d
		}
		if r.N > 0 {
			slices.Sort(samples[i])
			r.Median = samples[i][r.N/2]
		}
		out[c.Name] = r
		b.ReportMetric(float64(r.Mean().Nanoseconds()), c.Name+"-ns/cycle")
	}
	return out
}

// ReportRatio reports x's mean over y's as the metric name, and the ratio
// of their medians, which a burst of load from other processes moves less,
// as name-p50.
func ReportRatio(b *testing.B, name string, x, y Result) {
	b.Helper()
	if y.Total > 0 {
		b.ReportMetric(float64(x.Mean())/float64(y.Mean()), name)
	}
	if y.Median > 0 {
		b.ReportMetric(float64(x.Median)/float64(y.Median), name+"-p50")
	}
}
