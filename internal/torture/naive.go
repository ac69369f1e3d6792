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
)

// naiveSemAcquire is one node's part of the naive majority semaphore, the
// design the Redlock semaphore must not be: a sorted set of holder tokens
// scored by expiry on the server's clock, admitting a token while fewer
// than the limit are live. A client holds a permit when a majority of the
// nodes admitted it. With 5 nodes and size 2, clients admitted by nodes
// {0,1,2}, {2,3,4} and {0,1,3} each hold a majority while no node admits
// more than 2: three holders. It exists as the negative control of the
// semaphore checker.
//
// KEYS[1] the set; ARGV[1] the token, ARGV[2] the limit, ARGV[3] the TTL in
// milliseconds. Returns 1 if admitted.
var naiveSemAcquire = goredis.NewScript(`local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[2]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1`)

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
			ok, err := naiveSemAcquire.Run(ctx, c, []string{n.key}, token, n.size, n.ttl.Milliseconds()).Int()
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
