package deadline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type key struct{}

func TestSharedWithinBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock
		const timeout = 160 * time.Millisecond
		start := time.Now()
		a, cancel := c.Within(context.Background(), timeout)
		defer cancel()
		d, ok := a.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if left := d.Sub(start); left > timeout || left <= timeout-timeout/16 {
			t.Fatalf("deadline %v away, want in (%v, %v]", left, timeout-timeout/16, timeout)
		}

		// Calls within a sixteenth of the timeout share the context.
		time.Sleep(timeout / 64)
		b, _ := c.Within(context.Background(), timeout)
		if b != a {
			t.Fatal("a call soon after did not share the context")
		}
		// A different timeout does not.
		if o, _ := c.Within(context.Background(), 2*timeout); o == a {
			t.Fatal("a call with another timeout shared the context")
		}

		// After a sixteenth, a later deadline, still within bounds.
		time.Sleep(timeout / 16)
		now := time.Now()
		later, _ := c.Within(context.Background(), timeout)
		if later == a {
			t.Fatal("a call a sixteenth of the timeout later shared the context")
		}
		if d2, _ := later.Deadline(); d2.Sub(now) > timeout || d2.Sub(now) <= timeout-timeout/16 || !d2.After(d) {
			t.Fatalf("later deadline %v away (first %v), want later and in (%v, %v]", d2.Sub(now), d.Sub(now), timeout-timeout/16, timeout)
		}

		// The shared context ends at its deadline, not before.
		time.Sleep(time.Until(d) - time.Millisecond)
		if a.Err() != nil {
			t.Fatalf("done %v before its deadline", a.Err())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case <-a.Done():
		default:
			t.Fatal("not done at its deadline")
		}
		if !errors.Is(a.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", a.Err())
		}
	})
}

func TestWithinKeepsTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock
		const timeout = time.Second

		// A deadline within the timeout: the caller's context itself.
		short, cancelShort := context.WithTimeout(context.Background(), timeout/2)
		defer cancelShort()
		if got, _ := c.Within(short, timeout); got != short {
			t.Fatal("a context with an earlier deadline was not passed through")
		}

		// Values survive sharing, and the deadline is the shared one.
		valued := context.WithValue(context.Background(), key{}, "v")
		got, _ := c.Within(valued, timeout)
		if got.Value(key{}) != "v" {
			t.Fatal("the caller's value was lost")
		}
		shared, _ := c.Within(context.Background(), timeout)
		if d1, _ := got.Deadline(); func() bool { d2, _ := shared.Deadline(); return !d1.Equal(d2) }() {
			t.Fatal("a context with values did not share the deadline")
		}

		// A cancelled caller's context, made uncancellable, is shared and
		// not done.
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if got, _ := c.Within(context.WithoutCancel(cancelled), timeout); got.Err() != nil {
			t.Fatalf("WithoutCancel context done: %v", got.Err())
		}

		// A context that can be cancelled gets its own, cancelled with it.
		parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "p"))
		own, cancelOwn := c.Within(parent, timeout)
		defer cancelOwn()
		if own == shared || own.Value(key{}) != "p" {
			t.Fatal("a cancellable context was not given its own bounded context")
		}
		if d, ok := own.Deadline(); !ok || time.Until(d) != timeout {
			t.Fatalf("own deadline %v away, want %v", time.Until(d), timeout)
		}
		cancelParent()
		if !errors.Is(own.Err(), context.Canceled) {
			t.Fatalf("Err after the caller's cancel = %v", own.Err())
		}

		// A zero or negative timeout is already over.
		over, cancelOver := c.Within(context.Background(), 0)
		defer cancelOver()
		if over.Err() == nil {
			t.Fatal("a zero timeout gave a live context")
		}
	})
}

func TestDetachedFromAParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.Background())
		c := NewClock(parent)
		caller, cancelCaller := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		d := c.Detached(caller, time.Second)
		if d.Value(key{}) != "v" {
			t.Fatal("the caller's value was lost")
		}
		cancelCaller()
		if d.Err() != nil {
			t.Fatal("a detached context ended with its caller's")
		}
		if again := c.Detached(context.Background(), time.Second); again.Err() != nil {
			t.Fatal("the shared context ended early")
		}
		cancelParent()
		if !errors.Is(d.Err(), context.Canceled) {
			t.Fatalf("Err after the clock's parent ended = %v, want Canceled", d.Err())
		}
	})
}

func TestManyTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock
		// Past the cache's capacity, contexts are still bounded, one per
		// call.
		for i := range 2 * maxTimeouts {
			timeout := time.Duration(i+1) * time.Second
			a := c.Detached(context.Background(), timeout)
			if d, _ := a.Deadline(); time.Until(d) > timeout || time.Until(d) <= timeout-timeout/16 {
				t.Fatalf("timeout %v: deadline %v away", timeout, time.Until(d))
			}
			b := c.Detached(context.Background(), timeout)
			if shared := a == b; shared != (i < maxTimeouts) {
				t.Fatalf("timeout %d of %d: shared = %v", i+1, 2*maxTimeouts, shared)
			}
		}
	})
}

func TestWithinSharesForARepeatedCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock
		const timeout = 160 * time.Millisecond
		worker, stop := context.WithCancel(context.WithValue(context.Background(), key{}, "w"))
		first, cancelFirst := c.Within(worker, timeout)
		defer cancelFirst()
		second, _ := c.Within(worker, timeout)
		third, _ := c.Within(worker, timeout)
		if first == second {
			t.Fatal("the first call from a caller shared a context")
		}
		if second != third {
			t.Fatal("calls from the same caller at the same moment did not share")
		}
		if d, _ := second.Deadline(); time.Until(d) > timeout || time.Until(d) <= timeout-timeout/16 {
			t.Fatalf("shared deadline %v away, want in (%v, %v]", time.Until(d), timeout-timeout/16, timeout)
		}
		if second.Value(key{}) != "w" {
			t.Fatal("the caller's value was lost")
		}

		// Callers taking turns never share (each gets a context of its own,
		// released by its cancel function).
		other, stopOther := context.WithCancel(context.Background())
		defer stopOther()
		for range 3 {
			a, cancelA := c.Within(other, timeout)
			b, cancelB := c.Within(worker, timeout)
			if a == b || b == second {
				t.Fatal("callers taking turns shared a context")
			}
			cancelA()
			cancelB()
		}

		// The caller's cancellation ends the shared context.
		again, _ := c.Within(worker, timeout)
		if again.Err() != nil {
			t.Fatal("shared context ended early")
		}
		stop()
		if !errors.Is(again.Err(), context.Canceled) {
			t.Fatalf("Err after the caller's cancel = %v, want Canceled", again.Err())
		}
	})
}
