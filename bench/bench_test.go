package main

import (
	"context"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/locker"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestSpread(t *testing.T) {
	s := spread([]float64{3, math.NaN(), 1, 2, 10})
	if s != (Spread{Median: 2.5, Min: 1, Max: 10, N: 4}) {
		t.Errorf("spread = %+v", s)
	}
	if s := spread([]float64{math.NaN()}); s.N != 0 {
		t.Errorf("spread of NaN only = %+v, want zero", s)
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(ds, 0.5); p != 5 {
		t.Errorf("p50 = %v, want 5", p)
	}
	if p := percentile(ds, 0.99); p != 10 {
		t.Errorf("p99 = %v, want 10", p)
	}
}

func memoryBackend(t *testing.T) *dsync.Backend {
	t.Helper()
	b, err := dsync.Open(context.Background(), "memory://"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// noLock "locks" without excluding anyone: the negative control of the
// mutual-exclusion check.
type noLock struct{}

func (noLock) lock(context.Context, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}
func (noLock) close() {}

func TestContended(t *testing.T) {
	ctx := context.Background()
	b := memoryBackend(t)
	dt := dsyncTarget("memory", "", b, "", &locker.Options{TTL: lockTTL})
	defer dt.close()
	s, err := runContended(ctx, dt, 4, 1, "k", 50*time.Microsecond, true, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if s.Violations != 0 || s.MaxInside != 1 {
		t.Errorf("dsync on memory: %d violations, %d inside at most", s.Violations, s.MaxInside)
	}
	if s.Acquisitions == 0 || s.Handoffs == 0 || s.Min() == 0 {
		t.Errorf("dsync on memory: %d acquisitions, %d handoffs, per goroutine %v", s.Acquisitions, s.Handoffs, s.PerGoroutine)
	}

	broken := &target{name: "no lock", newWorker: func(context.Context) (worker, error) { return noLock{}, nil }}
	s, err = runContended(ctx, broken, 4, 1, "k", 200*time.Microsecond, true, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if s.Violations == 0 {
		t.Errorf("a lock that excludes nobody: no violation found (%d acquisitions, %d inside at most)", s.Acquisitions, s.MaxInside)
	}
}

func TestCycles(t *testing.T) {
	b := memoryBackend(t)
	dt := dsyncTarget("memory", "", b, "", &locker.Options{TTL: lockTTL})
	defer dt.close()
	s, err := runCycles(context.Background(), dt, 3, 50*time.Millisecond, func(int) string { return nextKey("u") })
	if err != nil {
		t.Fatal(err)
	}
	if s.Cycles == 0 || s.P50Us <= 0 || s.P99Us < s.P50Us || s.MeanUs <= 0 {
		t.Errorf("cycles: %+v", s)
	}
}

// failLock fails every lock call with an error no retry cures.
type failLock struct{}

func (failLock) lock(context.Context, string) (func(context.Context) error, error) {
	return nil, dsync.ErrInvalid
}
func (failLock) close() {}

// TestInterleaved: every target of the turn completes cycles, and one that
// fails is reported without stopping the others.
func TestInterleaved(t *testing.T) {
	b := memoryBackend(t)
	a := dsyncTarget("memory", "", b, "", &locker.Options{TTL: lockTTL})
	c := dsyncTarget("memory", "no fencing", b, "", &locker.Options{TTL: lockTTL, NoFencing: true})
	bad := &target{name: "failing", group: "memory", newWorker: func(context.Context) (worker, error) { return failLock{}, nil }}
	for _, x := range []*target{a, c, bad} {
		defer x.close()
	}
	samples, failed := runInterleaved(context.Background(), []*target{a, bad, c}, 100*time.Millisecond)
	for _, x := range []*target{a, c} {
		s, ok := samples[x.id()]
		if !ok || s.Cycles == 0 || s.P50Us <= 0 || s.P99Us < s.P50Us || s.MeanUs <= 0 {
			t.Errorf("%s: %+v (present: %v)", x.id(), s, ok)
		}
	}
	if n1, n2 := samples[a.id()].Cycles, samples[c.id()].Cycles; n1 < n2-1 || n2 < n1-1 {
		t.Errorf("interleaved targets ran %d and %d cycles; want one each in turn", n1, n2)
	}
	if _, ok := samples[bad.id()]; ok || !errors.Is(failed[bad.id()], dsync.ErrInvalid) {
		t.Errorf("the failing target: sample present %v, error %v", ok, failed[bad.id()])
	}
}

// TestReport renders the tables, checks and plot of a synthetic run.
func TestReport(t *testing.T) {
	ids := []TargetInfo{
		{ID: groupRedis + " / raw", Name: "raw SET NX PX + compare-and-delete", Group: groupRedis, Role: roleFloor},
		{ID: groupRedis + " / dsync", Name: "dsync", Group: groupRedis, Role: roleDsync},
		{ID: groupRedis + " / redsync", Name: "redsync", Group: groupRedis, Role: rolePeer},
	}
	run := &RunResult{Mode: "test", Config: Config{Rounds: 2, Contenders: 2}, Targets: ids}
	for r := range 2 {
		run.Rounds = append(run.Rounds, Round{
			Uncontended: map[string]CycleSample{
				ids[0].ID: {Cycles: 100, Seconds: 1, MeanUs: 100, P50Us: 90, P99Us: 200},
				ids[1].ID: {Cycles: 90, Seconds: 1, MeanUs: 110 + float64(r), P50Us: 100, P99Us: 210},
				ids[2].ID: {Cycles: 80, Seconds: 1, MeanUs: 120, P50Us: 110, P99Us: 220},
			},
			Contention: map[string]ContSample{
				ids[1].ID: {Seconds: 1, Acquisitions: 100, Handoffs: 99, HandoffP50Us: 300, HandoffP99Us: 900, WorstWaitMs: 5, PerGoroutine: []int{50, 50}},
				ids[2].ID: {Seconds: 1, Acquisitions: 100, Handoffs: 2, HandoffP50Us: 500, HandoffP99Us: 500, WorstWaitMs: 900, PerGoroutine: []int{1, 99}},
			},
		})
	}
	s, err := summarise(run, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := find(s.Uncontended, cycTarget, groupRedis, "dsync")
	if d == nil || d.VsFloor.Median != 1.105 || math.Abs(d.VsBestPeer.Min-110.0/120) > 1e-9 {
		t.Fatalf("dsync's summary: %+v", d)
	}
	md := markdown(s)
	for _, want := range []string{"within 1.15x", "dsync 1.10x (1.10-1.11)", "| Redis, 1 instance | dsync | 100 | 99 | 300 µs | 900 µs | 5.0 ms | 50/50 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := plotContention(s, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the plot is not a PNG: %v", err)
	}
}
