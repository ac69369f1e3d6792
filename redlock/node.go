package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/redisnode"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// ErrQuarantined: the node's server process is younger than MaxTTL (it was
// restarted, maybe without its data), so its vote does not count yet.
var ErrQuarantined = errors.New("dsync: redlock: node quarantined after a restart")

// node is one Redis master with its own client.
type node struct {
	index      int
	addr       string
	client     *goredis.Client
	node       *redisnode.Node
	notices    *redisnode.Notifier
	maxTTL     time.Duration
	quarantine bool
	ids        *identities // the driver's

	tel *telemetry.Nodes

	// born is when the node was made; heard, the time since born at which
	// the node last answered a request (any process's answer).
	born  time.Time
	heard atomic.Int64

	mu      sync.Mutex // protects the fields below
	runID   string     // of the server process last connected to
	reached time.Time  // when it was last connected to
	until   time.Time  // quarantined before this local time
	alias   error      // matches ErrAlias while that process is another node's
	// persist is runID's persistence: durable while every reading of it,
	// one per connection to it, said so (see onConnect).
	persist persistence
	// back fires at until, to report the end of a quarantine reported
	// begun (told); closed stops it for good.
	back   *time.Timer
	told   bool
	closed bool
}

func newNode(index int, opts *goredis.Options, o *Options, ids *identities, tel *telemetry.Nodes) (*node, error) {
	n := &node{index: index, addr: opts.Addr, maxTTL: o.MaxTTL, quarantine: !o.NoQuarantine, ids: ids, tel: tel, born: time.Now()}
	co := redisnode.Own(opts)
	co.MaxRetries = -1 // one attempt per call: dsync knows what is safe to repeat
	userHook := opts.OnConnect
	co.OnConnect = func(ctx context.Context, cn *goredis.Conn) error {
		if userHook != nil {
			if err := userHook(ctx, cn); err != nil {
				return err
			}
		}
		return n.onConnect(ctx, cn)
	}
	n.client = goredis.NewClient(co)
	rn, err := redisnode.New(n.client, o.Prefix)
	if err != nil {
		_ = n.client.Close()
		return nil, err
	}
	n.node, n.notices = rn, redisnode.NewNotifier(rn)
	return n, nil
}

// onConnect reads the server's run_id, uptime and persistence on every
// new connection, in one round trip. A connection reaches one server
// process for its whole life, so every command sent on it is attributed
// to the process recorded here: its quarantine, and whether another node
// reached it first (an alias).
//
// A restart is not quarantined when the node persists every write before
// answering (see readPersistence) and the driver saw it do so on both
// sides: every reading of the process before the restart said so, the
// first reading of the new one (this one) says so, and the new process
// started after the node last answered, but less than MaxTTL after, so
// that no process the driver never saw can have run in between long
// enough to leave its quarantine (see docs/redlock.md). The new process then holds
// every hold and fence counter the old one acknowledged. A later reading
// of a process (a later connection, a Health call) can only withdraw its
// durability, never grant it.
func (n *node) onConnect(ctx context.Context, cn *goredis.Conn) error {
	var info, pinfo *goredis.StringCmd
	var fsync, noRewrite *goredis.MapStringStringCmd
	_, _ = cn.Pipelined(ctx, func(p goredis.Pipeliner) error {
		info = p.Info(ctx, "server")
		pinfo, fsync, noRewrite = queuePersistence(ctx, p)
		return nil
	})
	if err := info.Err(); err != nil {
		return fmt.Errorf("redlock: INFO server on connect: %w", err)
	}
	runID, uptime, err := parseServerInfo(info.Val())
	if err != nil {
		return err
	}
	pers := readPersistence(pinfo, fsync, noRewrite)
	alias := n.ids.connected(n, runID)
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	heard := n.born.Add(time.Duration(n.heard.Load()))
	n.answered(now)
	restarted := n.runID != "" && n.runID != runID
	// uptime is the time since the start of the second in which the
	// process started (see parseServerInfo), so it started before
	// now - uptime + 1s, and the locks of a process it replaced by a
	// restart are all gone by then + MaxTTL. A process that may have been
	// up already when this node last reached another one is taken for no
	// restart of that one but another server at the node's address (a
	// moved DNS name or virtual IP, a port another process took): the
	// locks the other one granted may live until MaxTTL from now.
	earliest := now.Add(-uptime)
	replaced := restarted && earliest.Before(n.reached)
	started := earliest.Add(time.Second)
	// A durable restart must have started after the old process last
	// answered (it cannot be another server, up while that one was), by
	// its uptime's whole seconds: one in the same second is quarantined.
	durable := restarted && !earliest.Before(heard) && started.Sub(heard) < n.maxTTL &&
		n.persist.durable && pers.durable
	switch {
	case runID != n.runID:
		n.persist = pers
	case !pers.durable:
		n.persist = pers
	}
	n.runID, n.alias, n.reached = runID, alias, now
	if durable {
		// The new process keeps what the old one had, quarantine
		// included: n.until stays.
		if n.quarantine && !n.closed {
			n.tel.RestartedDurable(n.index)
		}
		return nil
	}
	if n.quarantine {
		end := started.Add(n.maxTTL)
		if replaced {
			end = now.Add(n.maxTTL)
		}
		if end.After(n.until) {
			begun := !n.until.After(now) || restarted
			n.until = end
			if end.After(now) {
				n.watchQuarantine(now, begun, restarted)
			}
		}
	}
	return nil
}

// answered records that the node answered a request at now, unless it
// is known to have answered later.
func (n *node) answered(now time.Time) {
	at := int64(now.Sub(n.born))
	for {
		old := n.heard.Load()
		if old >= at || n.heard.CompareAndSwap(old, at) {
			return
		}
	}
}

// reread records a reading of the persistence of the node's server made
// on a pooled connection: it can withdraw durability, never grant it.
func (n *node) reread(p persistence) {
	if p.durable {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.persist = p
}

// persistence returns the persistence of the node's current server
// process.
func (n *node) persistence() persistence {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.persist
}

// watchQuarantine reports a quarantine begun, and arms the timer that
// reports its end. n.mu must be held.
func (n *node) watchQuarantine(now time.Time, begun, restarted bool) {
	if n.closed {
		return
	}
	if begun {
		n.told = true
		n.tel.Quarantined(n.index, n.until, restarted)
	}
	if n.back == nil {
		n.back = time.AfterFunc(n.until.Sub(now), n.onBack)
	} else {
		n.back.Reset(n.until.Sub(now))
	}
}

// onBack reports the end of the quarantine, unless it was made longer
// meanwhile.
func (n *node) onBack() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || !n.told {
		return
	}
	if left := time.Until(n.until); left > 0 {
		n.back.Reset(left)
		return
	}
	n.told = false
	n.tel.Back(n.index)
}

// quarantinedUntil is the end of the node's quarantine: zero or past
// while it votes.
func (n *node) quarantinedUntil() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.until
}

// parseServerInfo reads a server's run_id from INFO server, and the time
// since the start of the second in which its process started.
// uptime_in_seconds is the difference of two instants each truncated to
// the second, the server's cached time and its start, so it may fall short
// of that time by up to a second; server_time_usec (Redis 6.2 and later) is
// that same cached time, and its fraction of a second makes up the
// difference exactly. Without it the uptime is the whole seconds only, up
// to a second short: the quarantine then lasts up to a second longer, and
// clients that connected at different moments end it at different times.
func parseServerInfo(info string) (runID string, uptime time.Duration, err error) {
	var haveUptime bool
	var frac time.Duration
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			s, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				return "", 0, fmt.Errorf("redlock: INFO server: uptime_in_seconds %q: %w", v, perr)
			}
			uptime, haveUptime = time.Duration(s)*time.Second, true
		case "server_time_usec":
			us, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				return "", 0, fmt.Errorf("redlock: INFO server: server_time_usec %q: %w", v, perr)
			}
			frac = time.Duration(us%1e6) * time.Microsecond
		}
	}
	if runID == "" || !haveUptime {
		return "", 0, errors.New("redlock: INFO server lacks run_id or uptime_in_seconds")
	}
	return runID, uptime + frac, nil
}

// excluded returns why the node's vote does not count at now: an error
// matching ErrAlias or ErrQuarantined; nil when it votes.
func (n *node) excluded(now time.Time) error {
	if err := n.aliasOf(); err != nil {
		return err
	}
	return n.quarantined(now)
}

// aliasOf returns an error matching ErrAlias while the node's server is
// another node's; nil otherwise.
func (n *node) aliasOf() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alias
}

// quarantined returns an error matching ErrQuarantined while the node's
// process is younger than MaxTTL.
func (n *node) quarantined(now time.Time) error {
	n.mu.Lock()
	until := n.until
	n.mu.Unlock()
	if now.Before(until) {
		return fmt.Errorf("%w: it votes again in %v", ErrQuarantined, until.Sub(now).Round(time.Millisecond))
	}
	return nil
}

func (n *node) currentRunID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runID
}

func (n *node) close() error {
	n.mu.Lock()
	n.closed = true
	if n.back != nil {
		n.back.Stop()
	}
	n.mu.Unlock()
	n.notices.Close()
	return n.client.Close()
}
