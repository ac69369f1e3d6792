package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// TestHealth: dsync health exits 0 on a backend that can serve and prints
// a line per server; 1 on one that cannot (a Redis server killed: at
// open; Redlock masters just started: quarantined, each with its end);
// --json is one object; the URL's password never shows.
func TestHealth(t *testing.T) {
	const password = "pw-health-cli"
	srv := redistest.Start(t, &redistest.Options{Password: password})

	code, out, errOut := runCLI(t, "health", "--url", srv.URL())
	if code != exitOK || !strings.Contains(out, "can serve") || !strings.Contains(out, "node 0  "+srv.Addr()+"  up ") || strings.Contains(out+errOut, password) {
		t.Errorf("health of a live server: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "health", "--json", "--url", srv.URL())
	var r healthReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitOK || !r.OK || len(r.Nodes) != 1 || !r.Nodes[0].Reachable ||
		r.Nodes[0].LatencyMs <= 0 || strings.Contains(out, password) || !strings.Contains(r.Backend, "xxxxx") {
		t.Errorf("health --json of a live server: exit %d, %q (%v)", code, out, err)
	}

	masters := redistest.StartN(t, 3, nil)
	url := "redlock://" + masters[0].Addr() + "," + masters[1].Addr() + "," + masters[2].Addr() + "/?max_ttl=30s"
	code, out, errOut = runCLI(t, "health", "--url", url)
	if code != exitFail || !strings.Contains(out, "cannot serve: 0 of 3 nodes answer and vote, 2 needed") || strings.Count(out, "quarantined until") != 3 {
		t.Errorf("health of fresh Redlock masters: exit %d, stdout %q, stderr %q; want 1, each quarantined", code, out, errOut)
	}
	code, out, _ = runCLI(t, "health", "--json", "--url", url)
	r = healthReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFail || r.OK || len(r.Nodes) != 3 {
		t.Fatalf("health --json of fresh Redlock masters: exit %d, %q (%v)", code, out, err)
	}
	for _, n := range r.Nodes {
		until, err := time.Parse(time.RFC3339Nano, n.QuarantinedUntil)
		if err != nil || !n.Reachable || until.Before(time.Now().Add(25*time.Second)) {
			t.Errorf("a fresh master in --json: %+v, want reachable, quarantined about max_ttl (30s)", n)
		}
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, "health", "--url", srv.URL(), "--timeout", "2s")
	if code != exitFail || !strings.Contains(out, "cannot serve") || strings.Contains(out+errOut, password) {
		t.Errorf("health of a killed server: exit %d, stdout %q, stderr %q; want 1, no password", code, out, errOut)
	}
}

// TestFewRedlockNodes: a Redlock over 2 masters opens, but dsync health
// reports it degraded (and still serving, status 0), and the commands that
// open it warn on stderr, unless -q.
func TestFewRedlockNodes(t *testing.T) {
	masters := redistest.StartN(t, 2, nil)
	url := "redlock://" + masters[0].Addr() + "," + masters[1].Addr() + "/?quarantine=false"
	code, out, errOut := runCLI(t, "health", "--url", url)
	if code != exitOK || !strings.Contains(out, "can serve; degraded: 2 node(s), fewer than 3") {
		t.Errorf("health of a 2-node Redlock: exit %d, stdout %q, stderr %q; want 0 and degraded", code, out, errOut)
	}
	code, out, _ = runCLI(t, "health", "--json", "--url", url)
	var r healthReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitOK || !r.OK || !strings.Contains(r.Degraded, "tolerates no node down") {
		t.Errorf("health --json of a 2-node Redlock: exit %d, %q (%v)", code, out, err)
	}
	const warning = "warning: redlock over 2 node(s)"
	if code, _, errOut := runCLI(t, "lock", "few", "--url", url, "--", "true"); code != exitOK || !strings.Contains(errOut, warning) {
		t.Errorf("lock on a 2-node Redlock: exit %d, stderr %q; want 0 and the warning", code, errOut)
	}
	if code, _, errOut := runCLI(t, "lock", "few", "-q", "--url", url, "--", "true"); code != exitOK || strings.Contains(errOut, "warning") {
		t.Errorf("lock -q on a 2-node Redlock: exit %d, stderr %q; want 0 and no warning", code, errOut)
	}
}

func TestFewNodesWarning(t *testing.T) {
	for url, want := range map[string]bool{
		"redlock://h1:6379":                            true,
		"redlock://:pw@h1:6379,h2:6379/0?ttl=1s":       true,
		"redlock:///?addr=[::1]:6379&addr=[::1]:6380":  true,
		"redlock://h1:6379/?addr=h2:6379&addr=h3:6379": false,
		"redlock://h1:6379,h2:6379,h3:6379,h4:6379":    false,
		"redis://h1:6379":                              false,
		"memory://x":                                   false,
		"etcd://h1:2379":                               false,
	} {
		if got := fewNodes(url) != ""; got != want {
			t.Errorf("fewNodes(%q) = %q, want a warning: %v", url, fewNodes(url), want)
		}
	}
}
