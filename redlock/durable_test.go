package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
)

// learnRestart makes d talk to node i until it has connected to the
// server's current process (the first call after a kill may find its
// pooled connection broken), and fails the test after a bound.
func learnRestart(t *testing.T, d *redlock.Driver, i int, s *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	want, err := s.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for redlock.RunIDOf(d, i) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the driver never connected to node %d's new process %s", i, want)
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = d.Holder(hctx, "learn-restart")
		cancel()
	}
}

// TestRestartOfDurableMaster: a master that persists every write before
// answering (AOF on, appendfsync always), killed with SIGKILL and
// restarted, votes at once for a client that saw it before and after, and
// still refuses the key held before the kill. The negative controls, a
// master with appendfsync everysec and one whose CONFIG is disabled (its
// setting cannot be read), are quarantined as any restarted master; so is
// the durable one for a client that first reaches it after its restart.
//
// Node 2 is cut off from client B, so that B's quorum (2 of 3) needs node
// 0's vote: B's grant of a free key right after the restart shows that
// node 0 voted, and its refusal of A's key (which node 1 is made to lose)
// that node 0 refused it.
func TestRestartOfDurableMaster(t *testing.T) {
	t.Parallel()
	// Longer than faultMaxTTL: every check after the restart must land
	// within it, and within A's hold, on a busy machine.
	const maxTTL = 5 * time.Second
	query := fmt.Sprintf("max_ttl=%v&node_timeout=%v", maxTTL, time.Second) // a generous node timeout: this test is not about speed
	for _, c := range []struct {
		name    string
		args    []string
		durable bool
		why     string // in Health's Detail of a node that is not durable
	}{
		{"always", nil, true, ""},
		{"everysec", []string{"--appendfsync", "everysec"}, false, "appendfsync everysec"},
		{"config disabled", []string{"--rename-command", "CONFIG", ""}, false, "CONFIG GET appendfsync failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartN(t, 3, &redistest.Options{Persistent: true, ExtraArgs: c.args})
			waitOutQuarantine(t, servers, maxTTL)
			addrs := addrsOf(servers)
			p2 := faultproxy.Start(t, addrs[2])
			aBackend, _ := openBackend(t, addrURL(addrs, query))
			bBackend, bd := openBackend(t, addrURL([]string{addrs[0], addrs[1], p2.Addr()}, query))
			ctx := context.Background()
			const ttl = maxTTL

			h, err := bBackend.Health(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range h.Nodes {
				if n.Durable != c.durable || (!c.durable && !strings.Contains(n.Detail, c.why)) {
					t.Errorf("Health of node %d: Durable %v, Detail %q; want Durable %v and the reason %q", i, n.Durable, n.Detail, c.durable, c.why)
				}
			}
			if h.Degraded != "" {
				t.Errorf("Health of 3 nodes: Degraded %q, want none", h.Degraded)
			}

			// A holds the key on every node; B has used every node, as a
			// long-lived client has.
			a, _ := acquireWithin(t, newLocker(t, aBackend, "held", &locker.Options{TTL: ttl}), 5*time.Second)
			warm, _ := acquireWithin(t, newLocker(t, bBackend, "warm", &locker.Options{TTL: ttl}), 5*time.Second)
			releaseWithin(t, warm, 5*time.Second)
			if err := p2.Refuse(); err != nil {
				t.Fatal(err)
			}
			tok := holdToken(t, a)
			if held := holders(t, nodeClients(t, servers), "held", tok); !slices.Contains(held, 0) {
				t.Fatalf("A's key is on nodes %v, want node 0 among them", held)
			}

			// The new process must start in a later wall-clock second
			// than node 0's last answer to B (its warm-up release): its
			// uptime is whole seconds, and one started in the same second
			// could have been up already, another server.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond))) // a wall-clock instant, not a condition
			// SIGKILL, then a start on the same data.
			if err := servers[0].Restart(ctx); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			learnRestart(t, bd, 0, servers[0])
			if got := storedToken(nodeValue(t, servers[0].NewClient(t), "held")); got != tok {
				t.Fatalf("node 0 lost A's hold in the restart (holds %q): the test needs a master that keeps it", got)
			}

			// Node 1 loses A's hold behind the driver's back, so that
			// node 0's vote decides B's attempt on A's key: node 1 grants
			// it, node 2 is cut off.
			if err := servers[1].NewClient(t).Del(ctx, redisKey("held")).Err(); err != nil {
				t.Fatal(err)
			}
			qerr := bd.QuarantineCheck(time.Now())
			free, err := newLocker(t, bBackend, "free", &locker.Options{TTL: ttl}).TryAcquire(ctx)
			_, herr := newLocker(t, bBackend, "held", &locker.Options{TTL: ttl}).TryAcquire(ctx)
			since := time.Since(restarted)
			if since >= maxTTL || time.Now().After(a.Expires()) {
				t.Fatalf("the checks ran %v after the restart, past max_ttl %v or A's hold: they cannot tell", since, maxTTL)
			}
			if herr == nil {
				t.Fatalf("B took the key A holds %v after node 0's restart", since)
			}
			if !c.durable {
				if !errors.Is(qerr, redlock.ErrQuarantined) || err == nil && free != nil {
					t.Fatalf("%s: node 0 restarted %v ago: quarantine check %v, free key granted %v; want node 0 quarantined and no quorum without it", c.name, since, qerr, err == nil)
				}
				return
			}
			if qerr != nil {
				t.Fatalf("a master with appendfsync always, restarted %v ago, is quarantined: %v", since, qerr)
			}
			if err != nil {
				t.Fatalf("B's attempt on a free key %v after node 0's restart (node 2 cut off): %v, want a grant with node 0's vote", since, err)
			}
			if v := votersOf(t, free); !slices.Contains(v, 0) {
				t.Errorf("voters %v, want node 0 among them", v)
			}
			_ = free.Release(ctx)
			var refused bool
			for _, ne := range nodeErrors(herr) {
				if ne.Index == 0 {
					refused = errors.Is(ne.Err, dsync.ErrNotAcquired) && !errors.Is(ne.Err, redlock.ErrQuarantined)
				}
			}
			if !refused {
				t.Errorf("B's attempt on A's key: %v; want node 0 to refuse it (it kept A's hold), not to sit out", herr)
			}

			// A client that reaches node 0 first after its restart did not
			// see it persist before: it quarantines it.
			_, cd := openBackend(t, addrURL(addrs, faultQuery("")))
			if err := cd.QuarantineCheck(time.Now()); !errors.Is(err, redlock.ErrQuarantined) && time.Since(restarted) < maxTTL {
				t.Errorf("a client new to node 0, %v after its restart: %v, want it quarantined", time.Since(restarted), err)
			}
			releaseWithin(t, a, 5*time.Second)
		})
	}
}

// TestDurabilityWithdrawn: a master whose appendfsync is lowered at run
// time (CONFIG SET) is no longer durable once the driver reads it again,
// on a new connection (node 1) or in a Health call (node 0), and its next
// restart is quarantined, although the setting was raised again before
// it: a later reading of a process can only withdraw its durability.
func TestDurabilityWithdrawn(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 3, &redistest.Options{Persistent: true})
	b, d := openBackend(t, redlockURL(servers, faultQuery("")))
	ctx := context.Background()
	lower := func(i int) *goredis.Client {
		t.Helper()
		admin := servers[i].NewClient(t)
		if err := admin.ConfigSet(ctx, "appendfsync", "everysec").Err(); err != nil {
			t.Fatal(err)
		}
		return admin
	}
	restart := func(i int, admin *goredis.Client) {
		t.Helper()
		if err := admin.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
			t.Fatal(err)
		}
		// In a later wall-clock second than the node's last answer, as
		// TestRestartOfDurableMaster explains.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond))) // a wall-clock instant, not a condition
		if err := servers[i].Restart(ctx); err != nil {
			t.Fatal(err)
		}
		learnRestart(t, d, i, servers[i])
		if err := d.QuarantineCheck(time.Now()); !errors.Is(err, redlock.ErrQuarantined) || !strings.Contains(err.Error(), servers[i].Addr()) {
			t.Errorf("node %d ran with appendfsync everysec for a while before its restart: %v, want it quarantined", i, err)
		}
	}

	// Node 1, read on a new connection: the driver's connections to it
	// end, and it reconnects.
	admin := lower(1)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = d.Holder(hctx, "reconnect")
		cancel()
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(list, "cmd=") > strings.Count(list, "flags=P")+1 { // the driver's and admin's own, not the driver's subscriptions
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver never reconnected to node 1: %s", list)
		}
	}
	restart(1, admin)

	// Node 0, read by Health.
	admin = lower(0)
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Nodes[0]; !n.Reachable || n.Durable || !strings.Contains(n.Detail, "appendfsync everysec") {
		t.Fatalf("node 0 after CONFIG SET appendfsync everysec: %+v, want reachable, not durable, and why", n)
	}
	if !h.Nodes[2].Durable {
		t.Errorf("node 2, untouched: %+v, want durable", h.Nodes[2])
	}
	restart(0, admin)
}

// TestReadPersistence: a server counts as durable only with the whole
// append-only file on and fsynced on every write, and anything unread
// counts against it.
func TestReadPersistence(t *testing.T) {
	const good = "# Persistence\r\nloading:0\r\nasync_loading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\naof_last_write_status:ok\r\n"
	info := func(s string, err error) *goredis.StringCmd { return goredis.NewStringResult(s, err) }
	conf := func(k, v string) *goredis.MapStringStringCmd {
		return goredis.NewMapStringStringResult(map[string]string{k: v}, nil)
	}
	always, noRw := conf("appendfsync", "always"), conf("no-appendfsync-on-rewrite", "no")
	for _, c := range []struct {
		name    string
		info    *goredis.StringCmd
		fsync   *goredis.MapStringStringCmd
		noRw    *goredis.MapStringStringCmd
		durable bool
		why     string
	}{
		{"AOF always", info(good, nil), always, noRw, true, "appendfsync always"},
		{"AOF off", info(strings.Replace(good, "aof_enabled:1", "aof_enabled:0", 1), nil), always, noRw, false, "AOF off"},
		{"AOF just turned on", info(strings.Replace(good, "aof_rewrite_in_progress:0", "aof_rewrite_in_progress:1", 1), nil), always, noRw, false, "rewrite in progress"},
		{"AOF rewrite scheduled", info(strings.Replace(good, "aof_rewrite_scheduled:0", "aof_rewrite_scheduled:1", 1), nil), always, noRw, false, "rewrite scheduled"},
		{"loading", info(strings.Replace(good, "loading:0", "loading:1", 1), nil), always, noRw, false, "loading"},
		{"write failed", info(strings.Replace(good, "status:ok", "status:err", 1), nil), always, noRw, false, "write failed"},
		{"field missing", info(strings.Replace(good, "aof_rewrite_scheduled:0\r\n", "", 1), nil), always, noRw, false, "rewrite scheduled"},
		{"INFO failed", info("", errors.New("NOPERM")), always, noRw, false, "INFO persistence failed"},
		{"everysec", info(good, nil), conf("appendfsync", "everysec"), noRw, false, "appendfsync everysec"},
		{"CONFIG renamed", info(good, nil), goredis.NewMapStringStringResult(nil, errors.New("ERR unknown command 'config'")), noRw, false, "CONFIG GET appendfsync failed"},
		{"CONFIG empty", info(good, nil), goredis.NewMapStringStringResult(map[string]string{}, nil), noRw, false, "answered nothing"},
		{"no fsync on rewrite", info(good, nil), always, conf("no-appendfsync-on-rewrite", "yes"), false, "no-appendfsync-on-rewrite yes"},
	} {
		durable, why := redlock.ReadPersistence(c.info, c.fsync, c.noRw)
		if durable != c.durable || !strings.Contains(why, c.why) {
			t.Errorf("%s: durable %v (%q), want %v (%q)", c.name, durable, why, c.durable, c.why)
		}
	}
}
