package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/leader"
)

// exitNoLeader is dsync leader's status when the election has no leader.
const exitNoLeader = 3

func runElect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("elect", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dsync elect NAME --id ID [flags] -- CMD [ARGS...]")
		fmt.Fprintln(stderr, "\nCampaigns in the election NAME as candidate ID and runs CMD only while leading. CMD gets DSYNC_KEY,")
		fmt.Fprintln(stderr, "DSYNC_TOKEN (the term: a fencing token that grows with every term) and DSYNC_LEADER_ID. When CMD exits or")
		fmt.Fprintln(stderr, "leadership is lost (CMD then gets SIGTERM, and SIGKILL after --grace), dsync resigns and campaigns again,")
		fmt.Fprintln(stderr, "until it is interrupted; with --once it exits after the first term.")
		fmt.Fprintf(stderr, "Exit status: with --once, CMD's own, or %d if leadership was lost while CMD ran; %d timed out (--timeout);\n", exitLost, exitTimedOut)
		fmt.Fprintf(stderr, "otherwise 128+signal when interrupted; 2 usage or backend error.\n\n")
		fs.PrintDefaults()
	}
	url := fs.String("url", os.Getenv("DSYNC_URL"), "backend URL (or $DSYNC_URL); see dsync url-help")
	id := fs.String("id", "", "this candidate's ID, unique among the candidates (default: hostname-pid)")
	ttl := fs.Duration("ttl", 0, "leadership lease TTL: how long the others wait for a leader that died (default: the URL's ttl, else 10s)")
	once := fs.Bool("once", false, "exit after the first term instead of campaigning again")
	timeout := fs.Duration("timeout", 0, "give up if not leading within this long and exit 4 (default: wait forever)")
	grace := fs.Duration("grace", 10*time.Second, "after leadership is lost, time between SIGTERM and SIGKILL to CMD")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fs.Usage()
		return exitOK
	}
	name, cmdArgs, rest, ok := splitCommand(args)
	if !ok {
		fs.Usage()
		return exitUsage
	}
	if code, ok := parseFlags(fs, rest); !ok {
		return code
	}
	const prefix = "dsync elect: "
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%sunexpected argument %q before -- (flags go between NAME and --)\n", prefix, fs.Arg(0))
		return exitUsage
	case *url == "":
		fmt.Fprintln(stderr, prefix+"no backend: pass --url or set DSYNC_URL (see dsync url-help)")
		return exitUsage
	case *grace < 0 || *timeout < 0:
		fmt.Fprintln(stderr, prefix+"--grace and --timeout must not be negative")
		return exitUsage
	}
	if *id == "" {
		host, _ := os.Hostname()
		*id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}

	b, code := openBackend(ctx, *url, stderr)
	if code != exitOK {
		return code
	}
	defer b.Close()
	e, err := leader.New(b, name, *id, &leader.Options{TTL: *ttl})
	if err != nil {
		fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
		return exitUsage
	}
	for {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if *timeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, *timeout)
		}
		l, err := e.Campaign(cctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
			return exitTimedOut
		case ctx.Err() != nil:
			return 128 + 2 // interrupted while campaigning (SIGINT or SIGTERM)
		case err != nil:
			fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
			return exitUsage
		}
		fmt.Fprintf(stderr, "%sleading %q as %q, term %d\n", prefix, name, *id, l.Term())
		env := []string{"DSYNC_KEY=" + name, "DSYNC_TOKEN=" + strconv.FormatUint(l.Term(), 10), "DSYNC_LEADER_ID=" + *id}
		code := runUnderLease(l, env, cmdArgs, *grace, prefix, "leadership", stdout, stderr)
		_ = l.Resign(context.WithoutCancel(ctx))
		if *once || ctx.Err() != nil {
			return code
		}
		fmt.Fprintf(stderr, "%sterm %d over (status %d); campaigning again\n", prefix, l.Term(), code)
		if errors.Is(l.Err(), dsync.ErrReleased) {
			// As leader.Run does: give a follower, woken by the
			// resignation, the time to take over.
			select {
			case <-time.After(e.RetryPeriod()):
			case <-ctx.Done():
				return code
			}
		}
	}
}

func runLeader(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("leader", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dsync leader NAME [--watch] [flags]")
		fmt.Fprintf(stderr, "\nPrints the current leader of the election NAME (exit %d if there is none); with --watch, prints every change\n", exitNoLeader)
		fmt.Fprintln(stderr, "(\"no leader\" included) with a timestamp until interrupted.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	url := fs.String("url", os.Getenv("DSYNC_URL"), "backend URL (or $DSYNC_URL); see dsync url-help")
	watch := fs.Bool("watch", false, "follow changes until interrupted")
	interval := fs.Duration("interval", 0, "with --watch, how often to read the leader besides release notices (default: a quarter of the URL's ttl, at most 1s)")
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return exitOK
		}
		return exitUsage
	}
	name := args[0]
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	const prefix = "dsync leader: "
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%sunexpected argument %q\n", prefix, fs.Arg(0))
		return exitUsage
	case *url == "":
		fmt.Fprintln(stderr, prefix+"no backend: pass --url or set DSYNC_URL (see dsync url-help)")
		return exitUsage
	case *interval < 0:
		fmt.Fprintln(stderr, prefix+"--interval must not be negative")
		return exitUsage
	}
	b, code := openBackend(ctx, *url, stderr)
	if code != exitOK {
		return code
	}
	defer b.Close()
	// An observer never campaigns; its ID is never stored.
	e, err := leader.New(b, name, "dsync-leader-observer", &leader.Options{ObserveInterval: *interval})
	if err != nil {
		fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
		return exitUsage
	}
	if !*watch {
		id, err := e.Leader(ctx)
		switch {
		case errors.Is(err, dsync.ErrNoLeader):
			fmt.Fprintln(stdout, "no leader")
			return exitNoLeader
		case err != nil:
			fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
			return exitFail
		}
		fmt.Fprintln(stdout, id)
		return exitOK
	}
	for info := range e.Observe(ctx) {
		who := info.ID
		if who == "" {
			who = "no leader"
		}
		fmt.Fprintf(stdout, "%s  %s\n", time.Now().Format("15:04:05.000"), who)
	}
	return exitOK
}
