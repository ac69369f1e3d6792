package memory

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// stepClock is a Clock that no store sweeps on its own.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func TestAmortizedSweepForgetsExpiredKeys(t *testing.T) {
	clk := &stepClock{}
	s := NewStore(clk)
	d := newDriver(s)
	defer d.Close()
	ctx := context.Background()
	for i := range 1000 {
		r := backends.Request{Key: fmt.Sprint(i), Token: "t", TTL: time.Millisecond}
		if _, err := d.Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
		clk.ns.Add(int64(time.Millisecond)) // each key expires before the next is made
	}
	s.mu.Lock()
	n := len(s.keys)
	s.mu.Unlock()
	if n > 2*minSweep {
		t.Fatalf("%d keys kept after 1000 expired unfenced holds, want at most %d", n, 2*minSweep)
	}
}

func TestManualClockDoesNotKeepStoresAlive(t *testing.T) {
	clk := NewManualClock(time.Unix(0, 0))
	for range 10 {
		NewStore(clk)
	}
	runtime.GC()
	clk.Advance(time.Second)
	clk.mu.Lock()
	defer clk.mu.Unlock()
	if n := len(clk.stores); n != 0 {
		t.Fatalf("clock still refers to %d collected stores", n)
	}
}
