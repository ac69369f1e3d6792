package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestOpenNamedStore(t *testing.T) {
	ctx := context.Background()
	b1, b2 := testutil.Open(t, "memory://open-named"), testutil.Open(t, "memory://open-named?ttl=30s")
	if got := b2.Defaults().TTL; got != 30*time.Second {
		t.Fatalf("ttl option: Defaults().TTL = %v, want 30s", got)
	}
	testutil.MustGrant(t, ctx, lease.Driver(b1), backends.Request{Key: "k", Token: "a", Value: []byte("v"), TTL: time.Minute})
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := lease.Driver(b2).Holder(ctx, "k"); err != nil || string(info.Value) != "v" {
		t.Fatalf("second Open of the same name: Holder = %+v, %v; want the first's hold", info, err)
	}
	d := memory.NewDriver(&memory.Options{Store: memory.Named("open-named")})
	defer d.Close()
	if err := d.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("Release through Named: %v", err)
	}
	if _, err := lease.Driver(testutil.Open(t, "memory://open-named-other")).Holder(ctx, "k"); !errors.Is(err, backends.ErrNotHeld) {
		t.Fatalf("another name shares state: err = %v", err)
	}
}

func TestOpenBadURL(t *testing.T) {
	for _, url := range []string{
		"memory://",
		"memory:///",
		"memory:demo",
		"memory://user@demo",
		"memory://demo/path",
		"memory://demo?unknown=1",
		"memory://demo?ttl=1s&ttl=2s", // repeated option
		"memory://demo:6379",          // a port: not a store name
		"memory://127.0.0.1:99999",
	} {
		t.Run(url, func(t *testing.T) {
			b, err := dsync.Open(context.Background(), url)
			var ie *backends.InvalidError
			if !errors.Is(err, backends.ErrInvalid) || !errors.As(err, &ie) {
				if b != nil {
					_ = b.Close()
				}
				t.Fatalf("Open(%q): err = %v, want an *InvalidError", url, err)
			}
		})
	}
}

func TestOpenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dsync.Open(ctx, "memory://cancelled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a done ctx: err = %v, want context.Canceled", err)
	}
}
