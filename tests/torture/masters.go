package torture

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
)

// What the Redlock masters hold, read straight from them: by a worker right
// after each permit it is granted (where the permit is), and by a test
// through the run (what every master held around a violation), so that a
// failed semaphore scenario explains itself.

// masterReadTimeout bounds one read of one master.
const masterReadTimeout = 500 * time.Millisecond

// masters reads the holds of one key on Redis masters.
type masters struct {
	key   string
	nodes []*redisnode.Node
	close func()
}

func newMasters(addrs []string, key string) *masters {
	m := &masters{key: key}
	var clients []*goredis.Client
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
		clients = append(clients, c)
		n, err := redisnode.New(c, "")
		if err != nil {
			panic(err) // a go-redis client and the default prefix: never refused
		}
		m.nodes = append(m.nodes, n)
	}
	m.close = func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	return m
}

// read returns every master's live holds of the key, by index (nil for a
// master that did not answer), read in parallel.
func (m *masters) read(ctx context.Context) [][]redisnode.Held {
	out := make([][]redisnode.Held, len(m.nodes))
	var wg sync.WaitGroup
	for i, n := range m.nodes {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, masterReadTimeout)
			defer cancel()
			if hs, err := n.Holds(rctx, m.key); err == nil {
				out[i] = append([]redisnode.Held{}, hs...)
			}
		})
	}
	wg.Wait()
	return out
}

// reportPlace emits the "held" event of the permit h: its slot, the
// masters that hold it as this worker reaches them, and its hold token.
func (m *masters) reportPlace(ctx context.Context, h hold, emit proc.Emit) {
	token, ok := lease.HoldToken(h)
	if !ok {
		return
	}
	slot := -1
	var on []string
	for i, hs := range m.read(ctx) {
		for _, x := range hs {
			if x.Token == token {
				slot = x.Target.Slot
				on = append(on, strconv.Itoa(i))
			}
		}
	}
	emit("held", strconv.Itoa(slot), strings.Join(on, ","), token)
}

// MasterLog samples what every master holds of a key, over a test's run.
type MasterLog struct {
	m      *masters
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // protects samples
	samples []masterSample
}

type masterSample struct {
	at    time.Duration // CLOCK_MONOTONIC, when the read began
	holds [][]redisnode.Held
}

// WatchMasters reads the holds of key on the masters at addrs (straight,
// not through a test's proxies) every interval until Stop.
func WatchMasters(addrs []string, key string, interval time.Duration) *MasterLog {
	ctx, cancel := context.WithCancel(context.Background())
	l := &MasterLog{m: newMasters(addrs, key), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			at := proc.Monotonic()
			holds := l.m.read(ctx)
			l.mu.Lock()
			l.samples = append(l.samples, masterSample{at, holds})
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// Stop ends the sampling and awaits it. It is idempotent.
func (l *MasterLog) Stop() {
	l.cancel()
	<-l.done
	l.m.close()
}

// Around describes the samples taken last before at and first after it:
// each master's live holds, as slot=holder (remaining TTL), the holder
// named by names (hold token to worker ID) where known.
func (l *MasterLog) Around(h *History, at time.Duration, names map[string]string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.samples, at, func(s masterSample, at time.Duration) int {
		return cmp.Compare(s.at, at)
	})
	var b strings.Builder
	for _, j := range []int{i - 1, i} {
		if j < 0 || j >= len(l.samples) {
			continue
		}
		s := l.samples[j]
		fmt.Fprintf(&b, "masters at %s:", h.at(s.at))
		for n, hs := range s.holds {
			fmt.Fprintf(&b, " [%d:", n)
			if hs == nil {
				b.WriteString(" -")
			}
			for _, x := range hs {
				who := names[x.Token]
				if who == "" {
					who = "?" + x.Token[:min(len(x.Token), 6)]
				}
				fmt.Fprintf(&b, " slot%d=%s(%v)", x.Target.Slot, who, x.TTL.Round(time.Millisecond))
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	return b.String()
}
