package main

import (
	"encoding/json"
	"io"

	"github.com/dsync-dev/dsync/tests/torture"
)

// checkSummary is dsync-demo check --json's output: one object.
type checkSummary struct {
	OK      bool           `json:"ok"`
	Report  string         `json:"report"` // the HTML report's path
	Targets []targetResult `json:"targets"`
}

// targetResult is one backend's soak.
type targetResult struct {
	Title       string        `json:"title"`
	OK          bool          `json:"ok"`
	Holds       int           `json:"holds"`
	Unavailable int           `json:"failed_acquisitions"`
	Accepted    int           `json:"writes_accepted"`
	Rejected    int           `json:"writes_rejected"`
	Unknown     int           `json:"writes_unknown"`
	LongestGap  float64       `json:"longest_gap_ms"` // longest time without a holder
	Checks      []checkResult `json:"checks"`
}

// checkResult is one check of one soak.
type checkResult struct {
	Name       string   `json:"name"`
	OK         bool     `json:"ok"`
	Skipped    string   `json:"skipped,omitempty"`
	Violations []string `json:"violations,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

// writeSummaryJSON writes the summary of reports as one JSON object
// (indented) on w.
func writeSummaryJSON(w io.Writer, reports []*torture.Report, reportPath string) {
	sum := checkSummary{OK: true, Report: reportPath, Targets: []targetResult{}}
	for _, r := range reports {
		st := r.Stats()
		tr := targetResult{
			Title: r.Title, OK: r.OK(), Holds: st.Holds, Unavailable: st.Unavailable,
			Accepted: st.Accepted, Rejected: st.Rejected, Unknown: st.Unknown,
			LongestGap: float64(st.LongestGap.Microseconds()) / 1000,
		}
		for _, res := range r.Results {
			tr.Checks = append(tr.Checks, checkResult{Name: res.Name, OK: res.OK(), Skipped: res.Skipped, Violations: res.Violations, Notes: res.Notes})
		}
		sum.OK = sum.OK && tr.OK
		sum.Targets = append(sum.Targets, tr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(sum)
}
