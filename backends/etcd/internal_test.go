package etcd

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestHoldTableBounded(t *testing.T) {
	var tab holdTable
	tab.init()
	long := time.Now().Add(-time.Hour) // renewed long ago: expired for sure
	for i := range 10_000 {
		tab.put(fmt.Sprint("k", i), "t", hold{lease: clientv3.LeaseID(i), rev: int64(i), ttl: 10, renewed: long})
	}
	if n := tab.len(); n > 2*minSweep {
		t.Fatalf("%d expired holds never released are still in the table, want at most %d", n, 2*minSweep)
	}
	// Live holds are kept, however many.
	var live holdTable
	live.init()
	for i := range 1000 {
		live.put(fmt.Sprint("k", i), "t", hold{rev: int64(i), ttl: 10, renewed: time.Now()})
	}
	if n := live.len(); n != 1000 {
		t.Fatalf("%d live holds in the table, want 1000", n)
	}
	// drop and renewed act on the hold of the given revision only.
	live.drop("k1", "t", 999)
	live.renewed("k1", "t", 999, time.Now().Add(time.Hour))
	if h, ok := live.get("k1", "t"); !ok || h.renewed.After(time.Now()) {
		t.Fatalf("another revision's drop or renewal touched the hold: %+v %v", h, ok)
	}
	live.drop("k1", "t", 1)
	if _, ok := live.get("k1", "t"); ok {
		t.Fatal("drop left the hold")
	}

	// held: a live hold that is not being released.
	now := time.Now()
	if !live.held("k2", now) || live.held("k1", now) || live.held("nope", now) {
		t.Fatal("held: wrong answer")
	}
	if live.held("k2", now.Add(11*time.Second)) {
		t.Fatal("held past the lease's TTL")
	}
	live.releasing("k2", "t", 2)
	if live.held("k2", now) {
		t.Fatal("held while being released")
	}
	// deleted drops the holds created before the deletion only.
	live.put("k3", "old", hold{key: "p/k3", rev: 5, ttl: 10, renewed: now})
	live.put("k3", "new", hold{key: "p/k3", rev: 9, ttl: 10, renewed: now})
	live.put("k3", "permit", hold{key: "p/k3/permit", limit: 2, rev: 6, ttl: 10, renewed: now})
	live.deleted("k3", "p/k3", 7)
	if _, ok := live.get("k3", "old"); ok {
		t.Fatal("deleted kept a hold created before the deletion")
	}
	if _, ok := live.get("k3", "new"); !ok {
		t.Fatal("deleted dropped a hold created after the deletion")
	}
	if _, ok := live.get("k3", "permit"); !ok {
		t.Fatal("deleted dropped a hold of another etcd key")
	}
	// permits: the live permits of one size, not being released; held
	// ignores them.
	live.put("s", "a", hold{key: "p/s/a", limit: 2, rev: 1, ttl: 10, renewed: now})
	live.put("s", "b", hold{key: "p/s/b", limit: 2, rev: 2, ttl: 10, renewed: now})
	live.put("s", "c", hold{key: "p/s/c", limit: 2, rev: 3, ttl: 10, renewed: now.Add(-time.Minute)})
	live.put("s", "d", hold{key: "p/s/d", limit: 3, rev: 4, ttl: 10, renewed: now})
	if got := live.permits("s", 2, now); len(got) != 2 {
		t.Fatalf("permits = %v, want the two live ones of size 2", got)
	}
	if live.held("s", now) {
		t.Fatal("held counts permits as a lock hold")
	}
	live.releasing("s", "a", 1)
	if got := live.permits("s", 2, now); len(got) != 1 || got[0] != "p/s/b" {
		t.Fatalf("permits while one is released = %v, want [p/s/b]", got)
	}
}

func TestLeasePool(t *testing.T) {
	var p leasePool
	p.init()
	now := time.Now()
	fresh := func(id int64, secs int64) idleLease {
		return idleLease{id: clientv3.LeaseID(id), secs: secs, ttl: secs, renewed: now}
	}
	if _, ok := p.get(3, now); ok {
		t.Fatal("empty pool gave a lease")
	}
	p.put(fresh(1, 3), now)
	p.put(fresh(2, 3), now)
	p.put(fresh(3, 5), now)
	p.put(idleLease{id: 4, secs: 3, ttl: 3, renewed: now.Add(-2 * time.Second)}, now) // 1 s left of 3: unusable
	if l, ok := p.get(3, now); !ok || l.id != 2 {
		t.Fatalf("get = %v %v, want the newest lease of the TTL, 2", l.id, ok)
	}
	if l, ok := p.get(3, now.Add(1600*time.Millisecond)); ok {
		t.Fatalf("get gave lease %v with less than half its TTL left", l.id)
	}
	if n := p.len(); n != 1 {
		t.Fatalf("%d leases in the pool, want 1 (the 5 s one)", n)
	}
	for i := range 3 * maxIdle {
		p.put(fresh(int64(100+i), int64(i%4+1)), now)
	}
	if n := p.len(); n > maxIdle {
		t.Fatalf("%d idle leases, want at most %d", n, maxIdle)
	}
	// Stale leases make room for fresh ones.
	later := now.Add(time.Hour)
	p.put(idleLease{id: 999, secs: 7, ttl: 7, renewed: later}, later)
	if l, ok := p.get(7, later); !ok || l.id != 999 {
		t.Fatalf("a full pool of stale leases refused a fresh one: %v %v", l.id, ok)
	}
}

func TestParseHosts(t *testing.T) {
	for in, want := range map[string][]string{
		"h1":                    {"h1:2379"},
		"h1:2380,h2":            {"h1:2380", "h2:2379"},
		"[::1]:2379,[fe80::1]":  {"[::1]:2379", "[fe80::1]:2379"},
		"10.0.0.1,10.0.0.2:23":  {"10.0.0.1:2379", "10.0.0.2:23"},
		"etcd-0.etcd.svc:12379": {"etcd-0.etcd.svc:12379"},
	} {
		got, err := parseHosts(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseHosts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "h1,", ":2379", "h1:x", "h1:70000", "::1", "[::1"} {
		if got, err := parseHosts(in); err == nil {
			t.Errorf("parseHosts(%q) = %v, want an error", in, got)
		}
	}
}

// TestEscapeNameInjective: distinct names give distinct keys, and no key
// has a "/" after the prefix, so no name nests under another.
func TestEscapeNameInjective(t *testing.T) {
	names := []string{"a", "a/b", "a%2Fb", "a%b", "a%252Fb", "%", "/", "//", "%2F", "a/", "/a", "a%", "%25"}
	seen := map[string]string{}
	for _, n := range names {
		e := escapeName(n)
		if prev, dup := seen[e]; dup {
			t.Errorf("%q and %q both escape to %q", prev, n, e)
		}
		seen[e] = n
		for i := range len(e) {
			if e[i] == '/' {
				t.Errorf("escapeName(%q) = %q contains /", n, e)
			}
		}
	}
}

func TestValueEncoding(t *testing.T) {
	for _, tc := range []struct {
		token string
		value []byte
	}{{"t", nil}, {"t", []byte("v")}, {"t", []byte("a\nb\n")}, {"tok", []byte("\n")}} {
		tok, v := decodeValue([]byte(encodeValue(tc.token, tc.value)))
		if tok != tc.token || string(v) != string(tc.value) {
			t.Errorf("round trip of %q %q = %q %q", tc.token, tc.value, tok, v)
		}
	}
	if tok, v := decodeValue([]byte("foreign")); tok != "foreign" || v != nil {
		t.Errorf("foreign value decoded as %q %q", tok, v)
	}
}
