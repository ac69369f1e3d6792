package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
)

// Exit statuses of dsync lock besides the command's own.
const (
	exitNotAcquired = 3 // --try and the lock is held by another owner
	exitTimedOut    = 4 // --timeout passed before the lock was acquired
	exitLost        = 5 // the lease was lost while the command ran; it was terminated
)

// forwarded are the signals dsync lock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("lock", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dsync lock NAME [flags] -- CMD [ARGS...]")
		fmt.Fprintln(stderr, "\nRuns CMD while holding the lock NAME, auto-extended; CMD gets DSYNC_KEY and DSYNC_TOKEN (the fencing token).")
		fmt.Fprintf(stderr, "Exit status: CMD's own; %d not acquired (--try); %d timed out (--timeout); %d lock lost while CMD ran (CMD was terminated); 2 usage or backend error.\n\n", exitNotAcquired, exitTimedOut, exitLost)
		fs.PrintDefaults()
	}
	url := fs.String("url", os.Getenv("DSYNC_URL"), "backend URL (or $DSYNC_URL); see dsync url-help")
	ttl := fs.Duration("ttl", 0, "lease TTL (default: the URL's ttl, else 10s)")
	try := fs.Bool("try", false, "make one attempt; exit 3 if the lock is held")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long and exit 4 (default: wait forever)")
	grace := fs.Duration("grace", 10*time.Second, "after the lock is lost, time between SIGTERM and SIGKILL to CMD")
	maxHold := fs.Duration("max-hold", 0, "stop extending after this total hold time (default 1h; negative: no bound)")
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
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dsync lock: unexpected argument %q before -- (flags go between NAME and --)\n", fs.Arg(0))
		return exitUsage
	}
	if *url == "" {
		fmt.Fprintln(stderr, "dsync lock: no backend: pass --url or set DSYNC_URL (see dsync url-help)")
		return exitUsage
	}
	if *grace < 0 || *timeout < 0 {
		fmt.Fprintln(stderr, "dsync lock: --grace and --timeout must not be negative")
		return exitUsage
	}

	b, code := openBackend(ctx, *url, stderr)
	if code != exitOK {
		return code
	}
	defer b.Close()
	l, err := locker.New(b, name, &locker.Options{TTL: *ttl, MaxHold: *maxHold})
	if err != nil {
		fmt.Fprintf(stderr, "dsync lock: %s\n", oneLine(err))
		return exitUsage
	}

	lease, code := acquireForCommand(ctx, l, *try, *timeout, stderr)
	if code != exitOK {
		return code
	}
	defer lease.Release(context.WithoutCancel(ctx))
	lease.AutoExtend()
	return runUnderLease(lease, cmdArgs, *grace, stdout, stderr)
}

// splitCommand splits "NAME [flags] -- CMD ARGS" into its parts.
func splitCommand(args []string) (name string, cmd, flags []string, ok bool) {
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		return "", nil, nil, false
	}
	name = args[0]
	for i, a := range args[1:] {
		if a == "--" {
			cmd = args[i+2:]
			return name, cmd, args[1 : i+1], len(cmd) > 0
		}
	}
	return "", nil, nil, false
}

func acquireForCommand(ctx context.Context, l *locker.Locker, try bool, timeout time.Duration, stderr io.Writer) (dsync.Lease, int) {
	if try {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "dsync lock: %s\n", oneLine(err))
			if errors.Is(err, dsync.ErrNotAcquired) {
				return nil, exitNotAcquired
			}
			return nil, exitUsage
		}
		return lease, exitOK
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "dsync lock: %s\n", oneLine(err))
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return nil, exitTimedOut
		case errors.Is(err, context.Canceled):
			return nil, 128 + int(syscall.SIGINT)
		}
		return nil, exitUsage
	}
	return lease, exitOK
}

// runUnderLease runs the command, forwards dsync's signals to it, and
// terminates it (SIGTERM, then SIGKILL after grace) if the lease is lost.
func runUnderLease(lease dsync.Lease, argv []string, grace time.Duration, stdout, stderr io.Writer) int {
	// The command's output is copied by exec's goroutines unless it is a
	// file; dsync's own messages go to the same stderr.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "DSYNC_KEY="+lease.Key(), "DSYNC_TOKEN="+strconv.FormatUint(lease.Token(), 10))
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "dsync lock: %v\n", err)
		return 127
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	lost := false
	var kill <-chan time.Time
	leaseDone := lease.Done()
	for {
		select {
		case err := <-exited:
			if lost {
				fmt.Fprintf(stderr, "dsync lock: %s\n", oneLine(lease.Err()))
				return exitLost
			}
			return exitStatus(err)
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-leaseDone:
			leaseDone = nil
			if errors.Is(lease.Err(), dsync.ErrLeaseLost) {
				lost = true
				fmt.Fprintf(stderr, "dsync lock: lock lost; sending SIGTERM to the command, SIGKILL in %v\n", grace)
				_ = cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(grace)
			}
		case <-kill:
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus maps the command's end to dsync's exit status: its own status,
// or 128+signal when a signal ended it, as shells do.
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 127
}

// lockedWriter serialises writes from the command's copier and dsync.
type lockedWriter struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}
