package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/semaphore"
)

// holdFlags are the flags of the subcommands that hold something: lock,
// sem and elect.
type holdFlags struct {
	url            string
	ttl            time.Duration
	try            bool
	timeout        time.Duration
	grace          time.Duration
	maxHold        time.Duration
	quiet, verbose bool
}

// define defines the flags; what names the hold ("lock", "permit",
// "leadership"); lease adds --try and --max-hold, which leadership has not.
func (h *holdFlags) define(c *cmdFlags, what string, lease bool) {
	c.url(&h.url)
	c.ttl(&h.ttl, what)
	if lease {
		c.BoolVar(&h.try, "try", false, "make one attempt; exit 3 if it fails (a usage error together with --timeout)")
		c.DurationVar(&h.maxHold, "max-hold", 0, "stop extending after this total hold time, after which the "+what+" is lost; 0 = the default (1h), negative = no bound")
		c.fromEnv("max-hold", "DSYNC_MAX_HOLD")
	}
	c.DurationVar(&h.timeout, "timeout", 0, "give up waiting after this long and exit 4; 0 = wait until interrupted")
	c.fromEnv("timeout", "DSYNC_TIMEOUT")
	c.DurationVar(&h.grace, "grace", 10*time.Second, "when CMD must stop, time between SIGTERM to its process group and SIGKILL")
	c.fromEnv("grace", "DSYNC_GRACE")
	c.BoolVar(&h.quiet, "q", false, "quiet: print none of dsync's own lines but usage and backend errors")
	c.BoolVar(&h.verbose, "v", false, "verbose: report acquisition, each extension and release on stderr")
}

// check reports the first problem with the flags' values, for a usage
// error; "" if none.
func (h *holdFlags) check(c *cmdFlags) string {
	switch {
	case h.url == "":
		return noBackend
	case h.try && c.explicit["timeout"]:
		return "--try and --timeout exclude each other: --try makes one attempt, --timeout waits"
	case h.ttl < 0:
		return "--ttl must not be negative (0 = the default)"
	case h.timeout < 0:
		return "--timeout must not be negative"
	case h.grace < 0:
		return "--grace must not be negative"
	}
	return ""
}

// signalling is the help's paragraph on what is signalled and when.
const signalling = `CMD runs in a process group of its own. When the %[1]s is lost, dsync sends SIGTERM to that whole
group, and SIGKILL to the group --grace later if any process of it is left; it then exits 5 at once,
whoever still holds CMD's output. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dsync are forwarded to the
group and end it the same way (SIGKILL after --grace), and dsync then exits with CMD's status; SIGUSR1
and SIGUSR2 are forwarded only. Processes CMD leaves behind when it exits on its own are not signalled.
As with timeout(1), CMD is not in the terminal's foreground group: a CMD that reads the terminal stops.`

const heldStatus = `  CMD's own status (128+signal if a signal ended it); with no CMD, 0 once released
  2  usage error or bad URL
  3  --try and the %[1]s was not free: another holder has it
  4  --timeout passed before the %[1]s was acquired, while another holder had it
  5  the %[1]s was lost while held (CMD was stopped, see above)
  6  backend unavailable: unreachable at open, or the attempt (--try; the last one before
     --timeout) could not be decided (server down or silent, no quorum, masters in quarantine)
  130, 143  SIGINT, SIGTERM while waiting to acquire
  127  CMD could not be started`

func lockFlags() *cmdFlags {
	return newFlags("lock", "usage: dsync lock NAME [flags] [-- CMD [ARGS...]]", `
Runs CMD while holding the lock NAME, extended automatically (about every third of the TTL). CMD gets
DSYNC_KEY (NAME) and DSYNC_TOKEN (the fencing token: pass it to what you protect, so that it can refuse
a stale holder's writes). The lock stores "HOST pid PID" as its value (see dsync holder).

Without -- CMD, dsync holds the lock for a shell script: it prints the fencing token on stdout (one
line), holds the lock and releases it on SIGINT or SIGTERM, or when stdin reaches EOF (unless stdin is
/dev/null, as for a background job of a script: then a signal ends it). For instance:
  coproc LOCK { dsync lock deploy; }; read -r token <&"${LOCK[0]}"
  ...steps...; exec {LOCK[1]}>&-; wait "$LOCK_PID"     # EOF on dsync's stdin: released

`+fmt.Sprintf(signalling, "lock"), fmt.Sprintf(heldStatus, "lock"))
}

func semFlags() *cmdFlags {
	return newFlags("sem", "usage: dsync sem NAME --size N [flags] [-- CMD [ARGS...]]", `
Runs CMD while holding one of the N permits of the semaphore NAME, extended automatically: at most N
commands run at once across every machine using NAME. Every user of NAME must give the same --size.
CMD gets DSYNC_KEY and DSYNC_TOKEN (the permit's fencing token). Without -- CMD, dsync holds a permit
as dsync lock holds a lock (see dsync lock --help): token on stdout, released on a signal or EOF.

`+fmt.Sprintf(signalling, "permit"), fmt.Sprintf(heldStatus, "permit"))
}

func runLock(ctx context.Context, args []string, io stdio) int {
	return runHeld(ctx, args, io, lockFlags(), "lock", 0)
}

func runSem(ctx context.Context, args []string, io stdio) int {
	return runHeld(ctx, args, io, semFlags(), "permit", -1)
}

// runHeld runs dsync lock (size 0) or dsync sem (size -1: --size is a
// flag): it acquires, then runs CMD under the hold, or holds until a
// signal or EOF when there is no CMD.
func runHeld(ctx context.Context, args []string, io stdio, c *cmdFlags, what string, size int) int {
	var h holdFlags
	h.define(c, what, true)
	if size < 0 {
		c.IntVar(&size, "size", 0, "the number of permits (required; every user of NAME must give the same)")
	}
	p, name, code, ok := c.parseNamed(args, io)
	if !ok {
		return code
	}
	if problem := h.check(c); problem != "" {
		return c.usageError(io.err, "%s", problem)
	}
	if p.hasCmd && len(p.cmd) == 0 {
		return c.usageError(io.err, "no command after --")
	}
	if c.name == "sem" && size < 1 {
		return c.usageError(io.err, "--size must be given, and positive (got %d)", size)
	}

	b, code := c.open(ctx, h.url, io)
	if b == nil {
		return code
	}
	defer b.Close()
	host, _ := os.Hostname()
	opts := &locker.Options{TTL: h.ttl, MaxHold: h.maxHold, Value: fmt.Appendf(nil, "%s pid %d", host, os.Getpid())}
	var a acquirer
	if c.name == "sem" {
		s, err := semaphore.New(b, name, size, opts)
		if err != nil {
			fmt.Fprintf(io.err, "dsync sem: %s\n", oneLine(err))
			return exitUsage
		}
		a = semAcquirer{s}
	} else {
		l, err := locker.New(b, name, opts)
		if err != nil {
			fmt.Fprintf(io.err, "dsync lock: %s\n", oneLine(err))
			return exitUsage
		}
		a = l
	}

	r := reporter{w: io.err, prefix: "dsync " + c.name + ": ", quiet: h.quiet, verbose: h.verbose}
	lease, code := acquire(ctx, a, h.try, h.timeout, what, r, io)
	if lease == nil {
		return code
	}
	defer func() {
		err := lease.Release(context.WithoutCancel(ctx))
		r.event("released %s (%v)", what, errOrOK(err))
	}()
	lease.AutoExtend()
	stopWatch := watchExtensions(lease, r)
	defer stopWatch()
	if !p.hasCmd {
		return holdUntilDone(ctx, lease, what, r, io)
	}
	env := []string{"DSYNC_KEY=" + lease.Key(), "DSYNC_TOKEN=" + strconv.FormatUint(lease.Token(), 10)}
	return runUnder(lease, what, env, p.cmd, h.grace, r, io)
}

// semAcquirer turns a Semaphore's permits into leases.
type semAcquirer struct{ s *semaphore.Semaphore }

func (a semAcquirer) Acquire(ctx context.Context) (dsync.Lease, error)    { return a.s.Acquire(ctx) }
func (a semAcquirer) TryAcquire(ctx context.Context) (dsync.Lease, error) { return a.s.TryAcquire(ctx) }

func errOrOK(err error) string {
	if err != nil {
		return oneLine(err)
	}
	return "ok"
}
