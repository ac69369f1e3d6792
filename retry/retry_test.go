package retry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/retry"
)

func TestExponentialGrowsWithinJitterAndCaps(t *testing.T) {
	p, err := retry.NewExponential(&retry.ExponentialOptions{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond, Jitter: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	b := p.Start()
	nominal := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, n := range nominal {
		n *= time.Millisecond
		d, ok := b.Next()
		if !ok {
			t.Fatalf("delay %d: policy gave up without a bound", i)
		}
		lo, hi := time.Duration(float64(n)*0.75), time.Duration(float64(n)*1.25)
		if d < lo || d > hi {
			t.Errorf("delay %d = %v, want within [%v, %v]", i, d, lo, hi)
		}
	}
}

func TestEveryStartIsFresh(t *testing.T) {
	p := retry.Default()
	b1 := p.Start()
	for range 10 {
		b1.Next()
	}
	d, _ := p.Start().Next()
	if d > time.Duration(float64(retry.DefaultMin)*(1+retry.DefaultJitter)) {
		t.Fatalf("a fresh backoff started at %v: state leaked from an earlier one", d)
	}
}

func TestConstantJitters(t *testing.T) {
	p, err := retry.NewConstant(&retry.ConstantOptions{Delay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := p.Start()
	seen := map[time.Duration]bool{}
	for range 50 {
		d, ok := b.Next()
		if !ok || d < 50*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("constant delay %v (ok %v), want within 50ms..150ms", d, ok)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct delays in 50: not jittered", len(seen))
	}
}

func TestMaxTries(t *testing.T) {
	p, _ := retry.NewConstant(&retry.ConstantOptions{MaxTries: 3})
	b := p.Start()
	n := 1 // the first attempt needs no delay
	for {
		if _, ok := b.Next(); !ok {
			break
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d attempts allowed, want 3", n)
	}
}

func TestMaxWaitIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := retry.NewConstant(&retry.ConstantOptions{Delay: 100 * time.Millisecond, MaxWait: time.Second})
		b := p.Start()
		start := time.Now()
		for {
			d, ok := b.Next()
			if !ok {
				break
			}
			time.Sleep(d)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("waited %v in all, want exactly MaxWait (1s): the last delay is clamped", waited)
		}
	})
}

func TestNoHiddenGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.Default().Start()
		start := time.Now()
		for time.Since(start) < 2*time.Hour {
			d, ok := b.Next()
			if !ok {
				t.Fatalf("policy gave up after %v with no bound set", time.Since(start))
			}
			time.Sleep(d)
		}
	})
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		start := time.Now()
		if err := retry.Wait(ctx, time.Second, nil); err != nil || time.Since(start) != time.Second {
			t.Fatalf("Wait: %v after %v, want nil after 1s", err, time.Since(start))
		}

		wake := make(chan struct{}, 1)
		wake <- struct{}{}
		start = time.Now()
		if err := retry.Wait(ctx, time.Hour, wake); err != nil || time.Since(start) != 0 {
			t.Fatalf("woken Wait: %v after %v, want nil at once", err, time.Since(start))
		}

		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if err := retry.Wait(cctx, time.Hour, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past ctx deadline: %v", err)
		}
	})
}

// TestInvalidOptions: every bad option of each constructor is an error
// that matches dsync.ErrInvalid and names the option, and no policy.
func TestInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		fn          func() (retry.Policy, error)
	}{
		{"negative min", "retry min", func() (retry.Policy, error) { return retry.NewExponential(&retry.ExponentialOptions{Min: -1}) }},
		{"max below min", "retry max", func() (retry.Policy, error) {
			return retry.NewExponential(&retry.ExponentialOptions{Min: time.Second, Max: time.Millisecond})
		}},
		{"multiplier below 1", "retry multiplier", func() (retry.Policy, error) {
			return retry.NewExponential(&retry.ExponentialOptions{Multiplier: 0.5})
		}},
		{"exponential jitter 1", "retry jitter", func() (retry.Policy, error) { return retry.NewExponential(&retry.ExponentialOptions{Jitter: 1}) }},
		{"exponential negative tries", "retry max tries", func() (retry.Policy, error) {
			return retry.NewExponential(&retry.ExponentialOptions{MaxTries: -1})
		}},
		{"exponential negative wait", "retry max wait", func() (retry.Policy, error) {
			return retry.NewExponential(&retry.ExponentialOptions{MaxWait: -1})
		}},
		{"negative delay", "retry delay", func() (retry.Policy, error) { return retry.NewConstant(&retry.ConstantOptions{Delay: -1}) }},
		{"constant negative jitter", "retry jitter", func() (retry.Policy, error) { return retry.NewConstant(&retry.ConstantOptions{Jitter: -0.5}) }},
		{"constant negative tries", "retry max tries", func() (retry.Policy, error) { return retry.NewConstant(&retry.ConstantOptions{MaxTries: -1}) }},
		{"constant negative wait", "retry max wait", func() (retry.Policy, error) { return retry.NewConstant(&retry.ConstantOptions{MaxWait: -1}) }},
	} {
		p, err := tc.fn()
		if p != nil {
			t.Errorf("%s: got a policy, want none", tc.name)
		}
		if !errors.Is(err, dsync.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "invalid "+tc.field+":") {
			t.Errorf("%s: %v, want an error matching dsync.ErrInvalid that names %q", tc.name, err, tc.field)
		}
		if errors.Is(err, dsync.ErrNotAcquired) {
			t.Errorf("%s: %v matches dsync.ErrNotAcquired too", tc.name, err)
		}
	}
}
