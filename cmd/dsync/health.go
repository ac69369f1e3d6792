package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

func healthFlags() *cmdFlags {
	return newFlags("health", "usage: dsync health [--json] [--timeout D] [flags]", `
Reports whether the backend can serve now, without taking a lock, for readiness probes and operators:
one line for the backend, then one per server: Redis its server; Redlock each master, with its restart
quarantine (a restarted master does not vote until max_ttl has passed since its start, unless it
persists every write: AOF with appendfsync always) and its persistence; etcd each endpoint, leader
or follower; memory always serves. A backend that cannot be reached when opening cannot serve
(status 1). A backend that serves but tolerates fewer failures than it should (Redlock over fewer
than 3 masters) is reported degraded, with the reason; it still serves (status 0).

With --json, one object: {"backend":URL,"ok":BOOL,"reason":TEXT,"degraded":TEXT,"nodes":[{"addr",
"reachable","latency_ms","quarantined_until" (RFC 3339),"durable","detail","error"}]}. The URL's
password and secret options are never shown.`,
		`  0  the backend can serve
  1  it cannot (servers down or unreachable, no quorum, no leader)
  2  usage error or bad URL`)
}

// healthReport is dsync health --json's output.
type healthReport struct {
	Backend  string       `json:"backend"`
	OK       bool         `json:"ok"`
	Reason   string       `json:"reason,omitempty"`
	Degraded string       `json:"degraded,omitempty"`
	Nodes    []healthNode `json:"nodes"`
}

type healthNode struct {
	Addr             string  `json:"addr"`
	Reachable        bool    `json:"reachable"`
	LatencyMs        float64 `json:"latency_ms,omitempty"`
	QuarantinedUntil string  `json:"quarantined_until,omitempty"`
	Durable          bool    `json:"durable,omitempty"`
	Detail           string  `json:"detail,omitempty"`
	Error            string  `json:"error,omitempty"`
}

func runHealth(ctx context.Context, args []string, io stdio) int {
	c := healthFlags()
	var rawURL string
	c.url(&rawURL)
	asJSON := c.Bool("json", false, "print one JSON object")
	timeout := c.Duration("timeout", 5*time.Second, "bound on opening the backend and probing its servers")
	p, code, ok := c.parse(args, io)
	if !ok {
		return code
	}
	switch {
	case p.hasCmd:
		return c.usageError(io.err, "dsync health runs no command")
	case len(p.pos) > 0:
		return c.usageError(io.err, "unexpected argument %q (dsync health takes no NAME)", p.pos[0])
	case rawURL == "":
		return c.usageError(io.err, noBackend)
	case *timeout <= 0:
		return c.usageError(io.err, "--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	scrub := secretsScrubber(rawURL)
	report := healthReport{Backend: backends.RedactURL(rawURL), Nodes: []healthNode{}}
	b, err := dsync.Open(ctx, rawURL)
	switch {
	case errors.Is(err, dsync.ErrInvalid) || errors.Is(err, dsync.ErrUnknownScheme):
		fmt.Fprintf(io.err, "dsync health: %s\n", oneLine(err))
		return exitUsage
	case err != nil:
		report.Reason = scrub(oneLine(err))
	default:
		defer b.Close()
		report.Backend = b.String()
		h, err := b.Health(ctx)
		if err != nil {
			report.Reason = scrub(oneLine(err))
			break
		}
		report.OK, report.Reason, report.Degraded = h.OK, scrub(h.Reason), scrub(h.Degraded)
		for _, n := range h.Nodes {
			hn := healthNode{Addr: n.Addr, Reachable: n.Reachable, Durable: n.Durable, Detail: n.Detail}
			if n.Reachable {
				hn.LatencyMs = float64(n.Latency.Microseconds()) / 1000
			}
			if !n.QuarantinedUntil.IsZero() {
				hn.QuarantinedUntil = n.QuarantinedUntil.Format(time.RFC3339Nano)
			}
			if n.Err != nil {
				hn.Error = scrub(oneLine(n.Err))
			}
			report.Nodes = append(report.Nodes, hn)
		}
	}
	if *asJSON {
		_ = json.NewEncoder(io.out).Encode(report)
	} else {
		printHealth(io.out, report)
	}
	if !report.OK {
		return exitFail
	}
	return exitOK
}

// printHealth writes the report as text: the backend's line, then one
// line per server.
func printHealth(w io.Writer, r healthReport) {
	degraded := ""
	if r.Degraded != "" {
		degraded = "; degraded: " + r.Degraded
	}
	if r.OK {
		fmt.Fprintf(w, "%s: can serve%s\n", r.Backend, degraded)
	} else {
		fmt.Fprintf(w, "%s: cannot serve: %s%s\n", r.Backend, r.Reason, degraded)
	}
	for i, n := range r.Nodes {
		state := "down"
		switch {
		case n.Reachable && n.LatencyMs > 0:
			state = fmt.Sprintf("up %.2fms", n.LatencyMs)
		case n.Reachable:
			state = "up"
		}
		line := fmt.Sprintf("  node %d  %s  %s", i, n.Addr, state)
		if n.QuarantinedUntil != "" {
			until, _ := time.Parse(time.RFC3339Nano, n.QuarantinedUntil)
			line += fmt.Sprintf("  quarantined until %s (%v left)", until.Format("15:04:05.000"), time.Until(until).Round(100*time.Millisecond))
		} else if n.Detail != "" {
			line += "  " + n.Detail
		}
		if n.Error != "" {
			line += "  " + n.Error
		}
		fmt.Fprintln(w, line)
	}
}

// secretsScrubber returns a function that replaces the URL's password and
// secret option values (those backends.RedactURL hides) in a message, in
// case a server or client echoes one.
func secretsScrubber(rawURL string) func(string) string {
	var secrets []string
	if u, err := url.Parse(rawURL); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			secrets = append(secrets, p)
		}
		for k, vs := range u.Query() {
			if !backends.IsSecretOption(k) {
				continue
			}
			for _, v := range vs {
				if v != "" {
					secrets = append(secrets, v)
				}
			}
		}
	}
	return func(s string) string {
		for _, secret := range secrets {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
		return s
	}
}
