package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/oteltest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// openObserved opens url with its telemetry sent to rec, closed when the
// test ends.
func openObserved(t *testing.T, url string, rec *oteltest.Recorder) *dsync.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := dsync.OpenWith(ctx, url, &dsync.BackendOptions{Telemetry: rec.Telemetry(false)})
	if err != nil {
		t.Fatalf("OpenWith(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func portOf(s *redistest.Server) string { return strconv.Itoa(s.Port()) }

// TestKilledMasterInNodeOutcomes: with one of 3 masters killed, its
// requests fail in its node's outcomes while the others succeed, every
// Acquire span has a child span per node, and Health still serves (2 of
// 3 vote) until a second master is killed.
func TestKilledMasterInNodeOutcomes(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 3, nil)
	rec := oteltest.New(t)
	b := openObserved(t, redlockURL(servers, faultQuery("")), rec)
	l := newLocker(t, b, "observed-kill", &locker.Options{TTL: faultMaxTTL})
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	const cycles = 3
	for range cycles {
		lease, _ := acquireWithin(t, l, 2*time.Second)
		releaseWithin(t, lease, 2*time.Second)
	}
	ctx := context.Background()
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || h.Nodes[1].Reachable || h.Nodes[1].Err == nil || !h.Nodes[0].Reachable || !h.Nodes[2].Reachable {
		t.Errorf("Health with node 1 killed = %+v, want OK, node 1 unreachable", h)
	}
	// The killed node's requests end at once (connection refused), but may
	// land after the call that sent them returned.
	testutil.Eventually(t, 2*time.Second, "the killed node's requests recorded", func() bool {
		_, n := oteltest.Sum(rec.Collect(t), "dsync.redlock.node.request.duration", "server.port", portOf(servers[1]), "dsync.operation", "release")
		return n >= cycles
	})
	ms := rec.Collect(t)
	for i, s := range servers {
		for _, op := range []string{"acquire", "release"} {
			for _, p := range oteltest.Points(ms, "dsync.redlock.node.request.duration", "server.port", portOf(s), "dsync.operation", op) {
				ok := p.Get("dsync.outcome") == "ok"
				if ok == (i == 1) {
					t.Errorf("node %d, %s: %d requests with outcome %s", i, op, p.Count, p.Get("dsync.outcome"))
				}
				if p.Get("dsync.redlock.node") != strconv.Itoa(i) || p.Get("server.address") != "127.0.0.1" {
					t.Errorf("node %d's point has attributes %v", i, p.Attrs.ToSlice())
				}
			}
		}
		_, n := oteltest.Sum(ms, "dsync.redlock.node.request.duration", "server.port", portOf(s), "dsync.operation", "acquire")
		if n < cycles {
			t.Errorf("node %d: %d acquire requests recorded, want at least %d", i, n, cycles)
		}
	}
	acquires := rec.Ended("dsync.TryAcquire")
	acquires = append(acquires, rec.Ended("dsync.Acquire")...)
	if len(acquires) != cycles {
		t.Fatalf("%d acquisition spans, want %d", len(acquires), cycles)
	}
	for _, a := range acquires {
		ports := map[string]bool{}
		for _, c := range rec.Ended("dsync.redlock.acquire") {
			if c.Parent.SpanID() == a.SpanContext.SpanID() {
				ports[oteltest.Attr(c, "server.port")] = true
			}
		}
		if len(ports) != 3 {
			t.Errorf("an acquisition span has node spans for %d nodes, want 3: %v", len(ports), ports)
		}
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	h, err = b.Health(ctx)
	if err != nil || h.OK || !strings.Contains(h.Reason, "1 of 3") {
		t.Errorf("Health with 2 of 3 nodes killed = %+v, %v; want not OK, 1 of 3 voting", h, err)
	}
}

// TestRestartedMasterQuarantineThenBack: a restarted master shows as
// quarantined (gauge, end time, counter, a log line and Health) until
// max_ttl has passed since its start, then as back.
func TestRestartedMasterQuarantineThenBack(t *testing.T) {
	t.Parallel()
	servers := agedServers(t, 3, nil)
	rec := oteltest.New(t)
	b := openObserved(t, redlockURL(servers, faultQuery("")), rec)
	ctx := context.Background()
	quarantined := func() (float64, []oteltest.Point) {
		ms := rec.Collect(t)
		v, _ := oteltest.Sum(ms, "dsync.redlock.node.quarantined", "server.port", portOf(servers[0]))
		return v, oteltest.Points(ms, "dsync.redlock.node.quarantine.until", "server.port", portOf(servers[0]))
	}
	if v, until := quarantined(); v != 0 || len(until) != 0 {
		t.Fatalf("an aged node reported quarantined (%v, %v)", v, until)
	}
	began := time.Now()
	if err := servers[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := b.Health(ctx) // the driver connects to the new process
	if err != nil {
		t.Fatal(err)
	}
	end := h.Nodes[0].QuarantinedUntil
	if !h.OK || end.IsZero() || end.Before(began.Add(faultMaxTTL)) || end.After(time.Now().Add(faultMaxTTL+time.Second)) {
		t.Fatalf("Health after node 0 restarted = %+v, want OK (2 of 3 vote), node 0 quarantined for about max_ttl %v", h, faultMaxTTL)
	}
	v, until := quarantined()
	if v != 1 || len(until) != 1 || until[0].Value != float64(end.UnixNano())/1e9 {
		t.Errorf("after the restart: quarantined %v, until %v; want 1 and %v", v, until, end)
	}
	if n, _ := oteltest.Sum(rec.Collect(t), "dsync.redlock.node.quarantines", "server.port", portOf(servers[0])); n != 1 {
		t.Errorf("quarantines of node 0: %v, want 1", n)
	}
	testutil.Eventually(t, time.Until(end)+2*time.Second, "node 0 back from quarantine", func() bool {
		return strings.Contains(rec.Logs(), "dsync: redlock node back from quarantine")
	})
	if back := time.Now(); back.Before(end) {
		t.Errorf("reported back %v before its quarantine ends", end.Sub(back))
	}
	if v, until := quarantined(); v != 0 || len(until) != 0 {
		t.Errorf("after its quarantine: quarantined %v, until %v; want 0 and none", v, until)
	}
	logs := rec.Logs()
	for _, w := range []string{`"msg":"dsync: redlock node quarantined`, `"reason":"its server restarted"`, `"addr":"` + servers[0].Addr() + `"`} {
		if !strings.Contains(logs, w) {
			t.Errorf("logs lack %s:\n%s", w, logs)
		}
	}
	if h, err := b.Health(ctx); err != nil || !h.OK || !h.Nodes[0].QuarantinedUntil.IsZero() {
		t.Errorf("Health after the quarantine = %+v, %v; want OK, node 0 voting", h, err)
	}
}
