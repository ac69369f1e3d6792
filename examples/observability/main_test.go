package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// TestDashboard runs the example on the memory backend: the dashboard
// shows every metric family the scenario moves, the spans reach the
// stdout exporter, and the logger gets the warning and the notices.
func TestDashboard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var spans, out, logs bytes.Buffer
	err := run(ctx, config{url: "memory://example-test", workers: 3, registry: prometheus.NewRegistry(),
		spans: &spans, out: &out, logs: &logs, holdFor: 5 * time.Millisecond, electionTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"health of memory://example-test: ok=true",
		"dsync_acquire_duration_seconds (histogram)", "dsync_acquire_wait_seconds (histogram)", "dsync_acquire_attempts (histogram)",
		"dsync_lease_hold_duration_seconds (histogram)", "dsync_lease_extensions_total (counter)", "dsync_lease_active (gauge)",
		"dsync_lease_cause=expired", "dsync_election_leader (gauge)", "dsync_election_change=won", "dsync_election_change=observed",
		"dsync_election_failover_duration_seconds (histogram)", "dsync_key=nightly-report", "dsync_primitive=semaphore",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the dashboard lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{`"Name":"dsync.Acquire"`, `"Name":"dsync.Campaign"`, `"Name":"dsync.Resign"`, `"Name":"dsync.Release"`} {
		if !strings.Contains(spans.String(), want) {
			t.Errorf("the spans lack %s", want)
		}
	}
	for _, want := range []string{`level=WARN msg="dsync: lease lost"`, `msg="dsync: leading"`, `msg="dsync: leader changed"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the logs lack %s:\n%s", want, logs.String())
		}
	}
}
