package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestCapabilities(t *testing.T) {
	got := memory.NewDriver(nil).Capabilities()
	want := backends.Capabilities{Name: "memory", MaxLimit: 1 << 20, Fencing: true, TTLResolution: time.Millisecond, ReleaseNotices: true, Order: backends.BoundedBarging}
	if got != want {
		t.Fatalf("Capabilities() = %+v, want %+v", got, want)
	}
}

func TestAcquireBadInput(t *testing.T) {
	ok := req("k", "t")
	with := func(f func(*backends.Request)) backends.Request { r := ok; f(&r); return r }
	tests := []struct {
		name  string
		req   backends.Request
		field string
		is    error
	}{
		{"empty key", with(func(r *backends.Request) { r.Key = "" }), "key", backends.ErrInvalid},
		{"empty token", with(func(r *backends.Request) { r.Token = "" }), "token", backends.ErrInvalid},
		{"zero ttl", with(func(r *backends.Request) { r.TTL = 0 }), "ttl", backends.ErrInvalid},
		{"negative ttl", with(func(r *backends.Request) { r.TTL = -time.Second }), "ttl", backends.ErrInvalid},
		{"ttl below resolution", with(func(r *backends.Request) { r.TTL = time.Microsecond }), "ttl", backends.ErrInvalid},
		{"negative limit", with(func(r *backends.Request) { r.Limit = -1 }), "limit", backends.ErrInvalid},
		{"limit over max", with(func(r *backends.Request) { r.Limit = 1<<20 + 1 }), "limit", backends.ErrInvalid},
		{"value too large", with(func(r *backends.Request) { r.Value = make([]byte, backends.MaxValueSize+1) }), "value", backends.ErrInvalid},
		{"mismatched limit", with(func(r *backends.Request) { r.Key = "sem"; r.Limit = 3 }), "size", backends.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newManual(t)
			testutil.MustGrant(t, context.Background(), d, backends.Request{Key: "sem", Token: "holder", TTL: time.Second, Limit: 2})
			_, err := d.Acquire(context.Background(), tt.req)
			var ie *backends.InvalidError
			if !errors.Is(err, tt.is) || !errors.As(err, &ie) || ie.Field != tt.field {
				t.Fatalf("Acquire: err = %v, want an *InvalidError on %q", err, tt.field)
			}
		})
	}
}

func TestKeyTokenTTLBadInput(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"refresh empty key", func() error { return d.Refresh(ctx, "", "t", time.Second) }, "key"},
		{"refresh empty token", func() error { return d.Refresh(ctx, "k", "", time.Second) }, "token"},
		{"refresh zero ttl", func() error { return d.Refresh(ctx, "k", "t", 0) }, "ttl"},
		{"refresh negative ttl", func() error { return d.Refresh(ctx, "k", "t", -time.Second) }, "ttl"},
		{"release empty key", func() error { return d.Release(ctx, "", "t") }, "key"},
		{"release empty token", func() error { return d.Release(ctx, "k", "") }, "token"},
		{"holder empty key", func() error { _, err := d.Holder(ctx, ""); return err }, "key"},
		{"watch empty key", func() error { _, err := d.WatchReleases(ctx, ""); return err }, "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var ie *backends.InvalidError
			if !errors.Is(err, backends.ErrInvalid) || !errors.As(err, &ie) || ie.Field != tt.field {
				t.Fatalf("err = %v, want an *InvalidError on %q", err, tt.field)
			}
		})
	}
}

func TestMismatchedLimitNamesBoth(t *testing.T) {
	d, _ := newManual(t)
	testutil.MustGrant(t, context.Background(), d, backends.Request{Key: "k", Token: "a", TTL: time.Second, Limit: 2})
	_, err := d.Acquire(context.Background(), backends.Request{Key: "k", Token: "b", TTL: time.Second})
	if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), "1") || !strings.Contains(err.Error(), "2") {
		t.Fatalf("err = %v, want an invalid limit naming 1 and 2", err)
	}
}

func TestExpiry(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	testutil.MustGrant(t, ctx, d, req("k", "old"))
	if _, err := d.Acquire(ctx, req("k", "new")); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("Acquire while held: err = %v, want ErrNotAcquired", err)
	}
	clk.Advance(999 * time.Millisecond)
	if info, err := d.Holder(ctx, "k"); err != nil || info.TTL != time.Millisecond {
		t.Fatalf("Holder 1ms before expiry = %+v, %v; want TTL 1ms", info, err)
	}
	clk.Advance(time.Millisecond)
	if _, err := d.Holder(ctx, "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Holder at expiry: err = %v, want ErrNotHeld", err)
	}
	testutil.MustGrant(t, ctx, d, req("k", "new"))
	if err := d.Release(ctx, "k", "old"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release of expired hold: err = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, "k"); err != nil {
		t.Fatalf("stale Release touched the new hold: Holder err = %v", err)
	}
}

func TestRefresh(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	clk.Advance(900 * time.Millisecond)
	if err := d.Refresh(ctx, "k", "a", 2*time.Second+time.Microsecond); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	clk.Advance(time.Second)
	if info, err := d.Holder(ctx, "k"); err != nil || info.TTL != time.Second+time.Microsecond {
		t.Fatalf("Holder after refresh = %+v, %v; want TTL 1.000001s (full precision)", info, err)
	}
	if err := d.Refresh(ctx, "k", "b", time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh by another token: err = %v, want ErrNotHeld", err)
	}
	if err := d.Refresh(ctx, "other", "a", time.Second); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh of another key: err = %v, want ErrNotHeld", err)
	}
}

func TestRefreshNeverRecreates(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	clk.Advance(time.Second)
	if err := d.Refresh(ctx, "k", "a", time.Hour); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh after expiry: err = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Refresh re-created the hold: Holder err = %v", err)
	}
	testutil.MustGrant(t, ctx, d, req("k", "b"))
}

func TestReleaseOnlyOwnHold(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	if err := d.Release(ctx, "k", "b"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("Release by another token: err = %v, want ErrNotHeld", err)
	}
	if _, err := d.Holder(ctx, "k"); err != nil {
		t.Fatalf("foreign Release removed the hold: %v", err)
	}
	if err := d.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := d.Release(ctx, "k", "a"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("double Release: err = %v, want ErrNotHeld", err)
	}
	testutil.MustGrant(t, ctx, d, req("k", "b"))
}

func TestFencesIncrease(t *testing.T) {
	ctx := context.Background()
	clk := memory.NewManualClock(epoch)
	store := memory.NewStore(clk)
	d1, d2 := memory.NewDriver(&memory.Options{Store: store}), memory.NewDriver(&memory.Options{Store: store})
	defer d1.Close()
	defer d2.Close()
	var last uint64
	for i := range 20 {
		d := []*memory.Driver{d1, d2}[i%2]
		token := fmt.Sprint(i)
		if i%5 == 4 {
			if g := testutil.MustGrant(t, ctx, d, backends.Request{Key: "k", Token: token, TTL: time.Second}); g.Fence != 0 {
				t.Fatalf("unfenced Acquire: Fence = %d, want 0", g.Fence)
			}
		} else {
			g := testutil.MustGrant(t, ctx, d, req("k", token))
			if g.Fence <= last {
				t.Fatalf("acquire %d: Fence = %d, want > %d", i, g.Fence, last)
			}
			last = g.Fence
		}
		if i%3 == 0 {
			clk.Advance(time.Second) // let it expire
		} else if err := d.Release(ctx, "k", token); err != nil {
			t.Fatal(err)
		}
	}
	if g := testutil.MustGrant(t, ctx, d1, req("other", "x")); g.Fence != 1 {
		t.Fatalf("first fence of another key = %d, want 1", g.Fence)
	}
	if g := testutil.MustGrant(t, ctx, d1, backends.Request{Key: "k", Token: "z", TTL: time.Second, Fence: true}); g.TTL != time.Second {
		t.Fatalf("Grant.TTL = %v, want 1s", g.TTL)
	}
}

func TestSharedStore(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore(nil)
	d1, d2 := memory.NewDriver(&memory.Options{Store: store}), memory.NewDriver(&memory.Options{Store: store})
	defer d2.Close()
	testutil.MustGrant(t, ctx, d1, backends.Request{Key: "k", Token: "a", Value: []byte("one"), TTL: time.Minute})
	if _, err := d2.Acquire(ctx, req("k", "b")); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("second driver Acquire: err = %v, want ErrNotAcquired", err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := d2.Holder(ctx, "k")
	if err != nil || string(info.Value) != "one" {
		t.Fatalf("Holder after the holder's driver closed = %+v, %v; want value one", info, err)
	}
	if err := d2.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("Release through another driver: %v", err)
	}
	if _, err := memory.NewDriver(nil).Holder(ctx, "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("a private store saw another store's hold: err = %v", err)
	}
}

func TestValueIsCopied(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	v := []byte("leader-1")
	testutil.MustGrant(t, ctx, d, backends.Request{Key: "k", Token: "a", Value: v, TTL: time.Second})
	v[0] = 'X'
	info, _ := d.Holder(ctx, "k")
	info.Value[1] = 'Y'
	info, err := d.Holder(ctx, "k")
	if err != nil || !bytes.Equal(info.Value, []byte("leader-1")) {
		t.Fatalf("Holder = %q, %v; want leader-1", info.Value, err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	for range 2 {
		if err := d.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	calls := map[string]error{}
	_, calls["Acquire"] = d.Acquire(ctx, req("k2", "a"))
	calls["Refresh"] = d.Refresh(ctx, "k", "a", time.Second)
	calls["Release"] = d.Release(ctx, "k", "a")
	_, calls["Holder"] = d.Holder(ctx, "k")
	_, calls["WatchReleases"] = d.WatchReleases(ctx, "k")
	for name, err := range calls {
		if !errors.Is(err, backends.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
}

func TestContextDone(t *testing.T) {
	d, _ := newManual(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Acquire(ctx, req("k", "a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: err = %v, want context.Canceled", err)
	}
	if _, err := d.Holder(context.Background(), "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("cancelled Acquire acted: Holder err = %v", err)
	}
	testutil.MustGrant(t, context.Background(), d, req("k", "a"))
	if err := d.Release(ctx, "k", "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release: err = %v, want context.Canceled", err)
	}
	if err := d.Refresh(ctx, "k", "a", time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh: err = %v, want context.Canceled", err)
	}
	if _, err := d.Holder(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Holder: err = %v, want context.Canceled", err)
	}
	if _, err := d.WatchReleases(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchReleases: err = %v, want context.Canceled", err)
	}
	if _, err := d.Holder(context.Background(), "k"); err != nil {
		t.Fatalf("cancelled Release acted: Holder err = %v", err)
	}
}

func TestSemaphore(t *testing.T) {
	ctx := context.Background()
	d, clk := newManual(t)
	sem := func(token string, ttl time.Duration) backends.Request {
		return backends.Request{Key: "sem", Token: token, Value: []byte(token), TTL: ttl, Limit: 3, Fence: true}
	}
	testutil.MustGrant(t, ctx, d, sem("a", 3*time.Second))
	testutil.MustGrant(t, ctx, d, sem("b", 5*time.Second))
	testutil.MustGrant(t, ctx, d, sem("c", 4*time.Second))
	if _, err := d.Acquire(ctx, sem("d", time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("fourth Acquire: err = %v, want ErrNotAcquired", err)
	}
	if info, err := d.Holder(ctx, "sem"); err != nil || string(info.Value) != "b" || info.TTL != 5*time.Second {
		t.Fatalf("Holder = %q %v, %v; want the last to expire, b with 5s", info.Value, info.TTL, err)
	}
	if err := d.Release(ctx, "sem", "c"); err != nil {
		t.Fatal(err)
	}
	testutil.MustGrant(t, ctx, d, sem("d", time.Second))
	clk.Advance(3 * time.Second) // a and d expire
	testutil.MustGrant(t, ctx, d, sem("e", time.Second))
	testutil.MustGrant(t, ctx, d, sem("f", time.Second))
	if _, err := d.Acquire(ctx, sem("g", time.Second)); !errors.Is(err, backends.ErrNotAcquired) {
		t.Fatalf("Acquire past the limit after expiry: err = %v, want ErrNotAcquired", err)
	}
	clk.Advance(5 * time.Second) // all expire: the key forgets its limit
	testutil.MustGrant(t, ctx, d, req("sem", "lock"))
}

func TestSemaphoreConcurrentAdmitsExactlyLimit(t *testing.T) {
	d := memory.NewDriver(nil)
	defer d.Close()
	const n, limit = 64, 3
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := backends.Request{Key: "sem", Token: fmt.Sprint(i), TTL: time.Minute, Limit: limit}
			_, err := d.Acquire(context.Background(), r)
			switch {
			case err == nil:
				admitted.Add(1)
			case !errors.Is(err, backends.ErrNotAcquired):
				t.Errorf("Acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != limit {
		t.Fatalf("admitted %d holders, want exactly %d", got, limit)
	}
}

func TestMutualExclusionUnderContention(t *testing.T) {
	store := memory.NewStore(nil)
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for w := range 8 {
		d := memory.NewDriver(&memory.Options{Store: store})
		defer d.Close()
		wg.Go(func() {
			ctx := context.Background()
			for i := range 200 {
				token := fmt.Sprintf("%d-%d", w, i)
				if _, err := d.Acquire(ctx, backends.Request{Key: "k", Token: token, TTL: time.Minute}); err != nil {
					continue
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := d.Release(ctx, "k", token); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping critical sections", n)
	}
}
