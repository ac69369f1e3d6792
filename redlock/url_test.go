package redlock_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
)

// TestOpenURLMalformed: the URL table every scheme runs, on the host list
// and the addr= options, before any dial.
func TestOpenURLMalformed(t *testing.T) {
	backendtest.CheckBadURLs(t, "redlock://:s3cret@HOST,127.0.0.1:2,127.0.0.1:3/?max_ttl=2s",
		backendtest.URLCase{URL: "redlock://:s3cret@127.0.0.1:1,127.0.0.1:2/?addr=127.0.0.1:99999", Text: `port "99999"`},
		backendtest.URLCase{URL: "redlock:///?addr=127.0.0.1:0", Text: `port "0"`},
		backendtest.URLCase{URL: "redlock:///?addr=::1:6379&addr=::1:6380&addr=::1:6381", Text: "needs brackets, as in [::1]:6379"},
		backendtest.URLCase{URL: "redlock://0::1:6379,0::1:6380,0::1:6381", Text: "give each IPv6 node as an addr= option"},
		backendtest.URLCase{URL: "redlock://", Text: "at least one node"},
		backendtest.URLCase{URL: "redlock:///?max_ttl=2s", Text: "at least one node"},
		backendtest.URLCase{URL: "redlock://127.0.0.1:1,,127.0.0.1:2", Text: "stray comma"},
		backendtest.URLCase{URL: "redlock://127.0.0.1:1,localhost,127.0.0.1:2", Text: "no port (want host:port)"},
		backendtest.URLCase{URL: "redlock://127.0.0.1:1,:2,127.0.0.1:3", Text: "empty host name"},
		backendtest.URLCase{URL: "redlock://127.0.0.1:1/?max_ttl=1s&max_ttl=2s", Text: "more than once"},
	)
}

// TestOpenURLIPv6: IPv6 nodes in brackets, given as addr= options.
func TestOpenURLIPv6(t *testing.T) {
	servers := redistest.StartN(t, 3, &redistest.Options{ExtraArgs: []string{"--bind", "127.0.0.1", "-::1"}})
	var q []string
	for _, s := range servers {
		addr := "[::1]:" + strconvPort(s.Addr())
		if c, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
			t.Skipf("no IPv6 loopback here: %v", err)
		} else {
			_ = c.Close()
		}
		q = append(q, "addr="+addr)
	}
	b, d := openBackend(t, "redlock:///?quarantine=false&"+strings.Join(q, "&"))
	if n := d.Nodes(); len(n) != 3 || !strings.HasPrefix(n[0], "[::1]:") {
		t.Fatalf("nodes %v, want the three [::1] addresses", n)
	}
	lease, _ := acquireWithin(t, newLocker(t, b, "ipv6", &locker.Options{TTL: faultMaxTTL}), 5*time.Second)
	releaseWithin(t, lease, 5*time.Second)
}
