package torture

import (
	"bytes"
	"os"
	"path/filepath"
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
