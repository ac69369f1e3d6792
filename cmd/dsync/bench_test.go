package main

import (
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchJSON(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "--url", "memory://bench-json", "--slices", "2", "--slice", "50ms", "--contenders", "3", "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rows []BenchResult
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want one per scenario: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.Cycles == 0 || r.PerSecond <= 0 || r.P50Micros <= 0 || r.P99Micros < r.P50Micros || r.Violations != 0 {
			t.Errorf("implausible row %+v", r)
		}
		if r.Scenario == "contended" && (r.MinPer == 0 || r.MaxPer < r.MinPer || r.Handoffs <= 0) {
			t.Errorf("contended row without fairness or handoffs: %+v", r)
		}
	}
}

func TestBenchTableAndCSV(t *testing.T) {
	code, out, errOut := runCLI(t, "bench", "--url", "memory://bench-a", "--url", "memory://bench-b", "--slices", "1", "--slice", "30ms", "--contenders", "2")
	if code != exitOK || strings.Count(out, "memory://bench-a") != 3 || !strings.Contains(out, "handoffs/s") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "bench", "--url", "memory://bench-csv", "--slices", "1", "--slice", "30ms", "--contenders", "2", "--csv")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != exitOK || err != nil || len(recs) != 4 || recs[0][0] != "scenario" {
		t.Fatalf("exit %d, csv error %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--contenders", "1"},
		{"bench", "--slices", "0"},
		{"bench", "--json", "--csv"},
		{"bench", "--url", "nosuch://x"},
	} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("dsync %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
