package redisnode_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// TestOwnDialsThroughTheCallersDialer: Own keeps a Dialer of the caller's;
// its failure reaches the command's caller as itself, and its connections
// serve commands.
func TestOwnDialsThroughTheCallersDialer(t *testing.T) {
	srv := redistest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refused := errors.New("refused by the caller's dialer")
	var dials, fail atomic.Int32
	fail.Store(1)
	o := &goredis.Options{Addr: srv.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if fail.Load() == 1 {
			return nil, refused
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	client := goredis.NewClient(redisnode.Own(o))
	defer client.Close()
	if err := client.Ping(ctx).Err(); !errors.Is(err, refused) {
		t.Fatalf("Ping through a failing dialer: %v, want its error", err)
	}
	fail.Store(0)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("Ping once the dialer succeeds: %v", err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("the caller's dialer was called %d times, want 2 (one dial per call)", n)
	}
	if o.Dialer == nil || o.ContextTimeoutEnabled || o.DialerRetries != 0 {
		t.Error("Own changed the caller's options")
	}
}
