package torture

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSoak runs the soak of dsync check, briefly, on each backend with
// every fault it promises safety under, and writes its HTML report.
func TestSoak(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		target := Target{Name: s.name, URL: s.url(), Redis: s.redis, Cluster: s.cluster}
		faults := SafeFaults(target)
		var lines []string
		rep, err := Soak(t.Context(), SoakConfig{
			Target: target, Spawn: e.h.spawn, Store: e.store, StoreAddr: e.addr,
			Prim: PrimLock, Key: key(t), Workers: 3, TTL: s.ttl, Duration: 8 * time.Second,
			Faults: faults, Every: 2 * time.Second,
			Progress: func(s Summary) { lines = append(lines, s.String()) },
		})
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		rep.WriteText(&text)
		t.Logf("faults %v; live summaries:\n%s\n%s", faults, strings.Join(lines, "\n"), text.String())
		wantOK(t, rep)
		if len(lines) < 3 || len(rep.Spans) == 0 {
			t.Errorf("%d summaries and %d faults in 8s", len(lines), len(rep.Spans))
		}
		path := filepath.Join(t.TempDir(), "report.html")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteHTML(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		page, _ := os.ReadFile(path)
		for _, want := range []string{"<svg", "Every check passed", rep.Spans[0].Kind, "w0"} {
			if !bytes.Contains(page, []byte(want)) {
				t.Errorf("the HTML report lacks %q", want)
			}
		}
	})
}

// TestProxyURL: every server address of a URL goes through a proxy (hosts
// with or without a port, addr= options); URLs that cannot be proxied are
// refused, and their soaks leave the proxy faults out of "safe".
func TestProxyURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://:pw@10.0.0.1/0?ttl=2s", "redis://:pw@P(10.0.0.1:6379)/0?ttl=2s"},
		{"redlock://h1:7000,h2,h3:7002/0", "redlock://P(h1:7000),P(h2:6379),P(h3:7002)/0"},
		{"redlock:///?addr=[::1]:6379&addr=[::1]:6380", "redlock:///?addr=P%28%5B%3A%3A1%5D%3A6379%29&addr=P%28%5B%3A%3A1%5D%3A6380%29"},
		{"etcd://e1,e2:2380/dsync/", "etcd://P(e1:2379),P(e2:2380)/dsync/"},
	} {
		got, err := proxyURL(c.in, func(addr string) (string, error) { return "P(" + addr + ")", nil })
		if err != nil || got != c.want {
			t.Errorf("proxyURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"rediss://:s3cret@h:6380", "etcds://h:2379", "redlock://h1,h2,h3?tls=true", "memory://x"} {
		_, err := proxyURL(in, func(addr string) (string, error) { return addr, nil })
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("proxyURL(%q): %v, want a refusal that names no password", in, err)
		}
		target := Target{Name: "user's", URL: in}
		if faults := SafeFaults(target); slices.Contains(faults, FaultLatency) || slices.Contains(faults, FaultBlackhole) {
			t.Errorf("SafeFaults(%q) = %v: proxy faults on a URL that cannot be proxied", in, faults)
		}
		if _, err := ParseFaults(target, "latency"); err == nil {
			t.Errorf("ParseFaults(%q, latency) accepted a proxy fault", in)
		}
	}
}
