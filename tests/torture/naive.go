package torture

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// naive is a client of the naive majority semaphore on a set of nodes.
type naive struct {
	clients []*goredis.Client
	key     string
	size    int
	ttl     time.Duration
}

func newNaive(addrs []string, key string, size int, ttl time.Duration) *naive {
	n := &naive{key: "naive:{" + key + "}", size: size, ttl: ttl}
	for _, a := range addrs {
		n.clients = append(n.clients, goredis.NewClient(&goredis.Options{
			Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: time.Second,
		}))
	}
	return n
}

func (n *naive) close() {
	for _, c := range n.clients {
		_ = c.Close()
	}
}

// each runs fn on every node in parallel, each call bounded by a tenth of
// the TTL, and returns how many returned true.
func (n *naive) each(ctx context.Context, fn func(ctx context.Context, c *goredis.Client) bool) int {
	var (
		mu    sync.Mutex
		votes int
		wg    sync.WaitGroup
	)
	for _, c := range n.clients {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, n.ttl/10)
			defer cancel()
			if fn(cctx, c) {
				mu.Lock()
				votes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return votes
}

// acquire tries until a majority admits it or ctx ends, withdrawing every
// failed attempt from all nodes.
func (n *naive) acquire(ctx context.Context) (hold, error) {
	for {
		var b [16]byte
		_, _ = crand.Read(b[:])
		token := hex.EncodeToString(b[:])
		start := time.Now()
		votes := n.each(ctx, func(ctx context.Context, c *goredis.Client) bool {
			ok, err := redistest.NaiveSemAcquire.Run(ctx, c, []string{n.key}, token, n.size, n.ttl.Milliseconds()).Int()
			return err == nil && ok == 1
		})
		validity := n.ttl - time.Since(start) - n.ttl/100 - 2*time.Millisecond
		if votes > len(n.clients)/2 && validity > 0 {
			h := &naiveHold{n: n, token: token, expires: start.Add(n.ttl - n.ttl/100 - 2*time.Millisecond), done: make(chan struct{})}
			h.timer = time.AfterFunc(validity, func() { h.end(fmt.Errorf("%w: validity ran out", dsync.ErrLeaseLost)) })
			return h, nil
		}
		n.withdraw(token)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", dsync.ErrNotAcquired, ctx.Err())
		case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond):
		}
	}
}

func (n *naive) withdraw(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.ttl)
	defer cancel()
	n.each(ctx, func(ctx context.Context, c *goredis.Client) bool {
		return c.ZRem(ctx, n.key, token).Err() == nil
	})
}

// naiveHold is a permit of the naive semaphore. It has no fencing token.
type naiveHold struct {
	n       *naive
	token   string
	expires time.Time
	timer   *time.Timer
	done    chan struct{}

	mu  sync.Mutex // protects err
	err error
}

func (h *naiveHold) Token() uint64         { return 0 }
func (h *naiveHold) Expires() time.Time    { return h.expires }
func (h *naiveHold) Done() <-chan struct{} { return h.done }

func (h *naiveHold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *naiveHold) end(err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	h.err = err
	close(h.done)
	return true
}

func (h *naiveHold) Release(ctx context.Context) error {
	h.timer.Stop()
	lost := !h.end(dsync.ErrReleased)
	h.n.withdraw(h.token)
	if lost {
		return fmt.Errorf("%w: %w", dsync.ErrNotHeld, h.Err())
	}
	return nil
}
