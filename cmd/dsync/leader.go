package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
)

// watchInterval is dsync leader --watch's default reading period besides
// release notices: short, so that a new leader shows at once.
const watchInterval = 200 * time.Millisecond

func leaderFlags() *cmdFlags {
	return newFlags("leader", "usage: dsync leader NAME [--watch] [--json] [flags]", `
Prints the current leader of the election NAME (its candidate ID), or "no leader". With --watch, reads
the leader every --interval and at once on the backend's release notice, and prints each leader or term
a read finds that differs from the last one printed ("no leader" included), with a timestamp, until
interrupted: a resignation shows at once, another change within --interval. A term shorter than
--interval may go unseen; a leader that resigned and won again between two reads shows again if the
backend has fencing (its term changed), else once.

With --json, each line is one JSON object: {"election":NAME,"leader":ID or null,"term":T,"time":RFC
3339}, where T is the leader's term (its fencing token; 0 on a backend without fencing).`,
		`  0  a leader was printed (--watch: interrupted)
  1  the leader could not be read
  2  usage error, bad URL or backend unreachable
  3  no leader`)
}

// leaderLine is one line of dsync leader --json.
type leaderLine struct {
	Election string  `json:"election"`
	Leader   *string `json:"leader"` // null: no leader
	Term     uint64  `json:"term"`   // 0: no leader, or no fencing
	Time     string  `json:"time"`
}

func runLeader(ctx context.Context, args []string, io stdio) int {
	c := leaderFlags()
	var url string
	c.url(&url)
	watch := c.Bool("watch", false, "follow changes until interrupted")
	asJSON := c.Bool("json", false, "print JSON objects, one a line")
	interval := c.Duration("interval", watchInterval, "with --watch, how often to read the leader besides release notices")
	p, name, code, ok := c.parseNamed(args, io)
	if !ok {
		return code
	}
	switch {
	case p.hasCmd:
		return c.usageError(io.err, "dsync leader runs no command")
	case url == "":
		return c.usageError(io.err, noBackend)
	case *interval <= 0:
		return c.usageError(io.err, "--interval must be positive")
	}
	b, code := c.open(ctx, url, io)
	if b == nil {
		return code
	}
	defer b.Close()
	e, err := leader.NewObserver(b, name, &leader.Options{ObserveInterval: *interval})
	if err != nil {
		fmt.Fprintf(io.err, "dsync leader: %s\n", oneLine(err))
		return exitUsage
	}
	show := func(li dsync.LeaderInfo) {
		printLeader(io.out, name, li, *asJSON, *watch)
	}
	if !*watch {
		li, err := e.Leader(ctx)
		switch {
		case errors.Is(err, dsync.ErrNoLeader):
			show(dsync.LeaderInfo{})
			return exitNoLeader
		case err != nil:
			fmt.Fprintf(io.err, "dsync leader: %s\n", oneLine(err))
			return exitFail
		}
		show(li)
		return exitOK
	}
	for li := range e.Observe(ctx) {
		show(li)
	}
	return exitOK
}

// printLeader prints one line: the leader's ID or "no leader" (li.ID
// empty), after a timestamp when stamped, or as JSON with the term.
func printLeader(w io.Writer, name string, li dsync.LeaderInfo, asJSON, stamped bool) {
	now := time.Now()
	id := li.ID
	if asJSON {
		line := leaderLine{Election: name, Term: li.Term, Time: now.Format(time.RFC3339Nano)}
		if id != "" {
			line.Leader = &id
		}
		_ = json.NewEncoder(w).Encode(line)
		return
	}
	if id == "" {
		id = "no leader"
	}
	if stamped {
		fmt.Fprintf(w, "%s  %s\n", now.Format("15:04:05.000"), id)
		return
	}
	fmt.Fprintln(w, id)
}
