package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
)

func electFlags() *cmdFlags {
	return newFlags("elect", "usage: dsync elect NAME [--id ID] [flags] -- CMD [ARGS...]", `
Campaigns in the election NAME as candidate ID and runs CMD only while leading. CMD gets DSYNC_KEY,
DSYNC_TOKEN (the term: a fencing token that grows with every term) and DSYNC_LEADER_ID. When CMD exits,
dsync resigns (so that another candidate takes over at once) and campaigns again, until it is
interrupted; with --once it exits after the first term.

`+fmt.Sprintf(signalling, "leadership"), `  with --once, CMD's own status (128+signal if a signal ended it); otherwise 128+signal when
  interrupted between terms or while CMD ran
  2  usage error or bad URL
  4  --timeout passed before leading, while another candidate led
  5  leadership was lost while CMD ran (with --once; CMD was stopped, see above)
  6  backend unavailable: unreachable at open, or the last attempt before --timeout could not be
     decided (server down or silent, no quorum, masters in quarantine)
  130, 143  SIGINT, SIGTERM while campaigning
  127  CMD could not be started`)
}

func runElect(ctx context.Context, args []string, io stdio) int {
	c := electFlags()
	var h holdFlags
	h.define(c, "leadership", false)
	id := c.String("id", "", "this candidate's `ID`, unique among the candidates (default: HOSTNAME-PID)")
	c.fromEnv("id", "DSYNC_ID")
	once := c.Bool("once", false, "exit after the first term instead of campaigning again")
	p, name, code, ok := c.parseNamed(args, io)
	if !ok {
		return code
	}
	if problem := h.check(c); problem != "" {
		return c.usageError(io.err, "%s", problem)
	}
	if len(p.cmd) == 0 {
		return c.usageError(io.err, "no command: dsync elect runs CMD, given after --")
	}
	if *id == "" {
		host, _ := os.Hostname()
		*id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}

	b, code := c.open(ctx, h.url, io)
	if b == nil {
		return code
	}
	defer b.Close()
	e, err := leader.New(b, name, *id, &leader.Options{TTL: h.ttl})
	if err != nil {
		fmt.Fprintf(io.err, "dsync elect: %s\n", oneLine(err))
		return exitUsage
	}
	r := reporter{w: io.err, prefix: "dsync elect: ", quiet: h.quiet, verbose: h.verbose}
	for {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if h.timeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, h.timeout)
		}
		r.event("campaigning in %q as %q", name, *id)
		l, err := e.Campaign(cctx)
		cancel()
		if err != nil {
			return acquireFailed(ctx, err, r, io)
		}
		r.notice("leading %q as %q, term %d", name, *id, l.Term())
		env := []string{"DSYNC_KEY=" + name, "DSYNC_TOKEN=" + strconv.FormatUint(l.Term(), 10), "DSYNC_LEADER_ID=" + *id}
		code := runUnder(l, "leadership", env, p.cmd, h.grace, r, io)
		err = l.Resign(context.WithoutCancel(ctx))
		r.event("resigned term %d (%v)", l.Term(), errOrOK(err))
		if *once {
			return code
		}
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		r.notice("term %d over (status %d); campaigning again", l.Term(), code)
		if errors.Is(l.Err(), dsync.ErrReleased) {
			// As leader.Run does: give a follower, woken by the
			// resignation, the time to take over.
			select {
			case <-time.After(e.RetryPeriod()):
			case <-ctx.Done():
				return interrupted(ctx)
			}
		}
	}
}
