package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/dsync-dev/dsync/semaphore"
)

// Exit statuses of dsync lock, sem and elect besides the command's own.
const (
	exitNotAcquired = 3 // --try and the lock is held by another owner (every permit taken)
	exitTimedOut    = 4 // --timeout passed before the lock was acquired
	exitLost        = 5 // the lease was lost while the command ran; it was terminated
)

// forwarded are the signals dsync lock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// heldCommand describes a subcommand that runs a command while holding a
// lease: dsync lock (a lock) and dsync sem (a semaphore permit).
type heldCommand struct {
	name string // the subcommand
	what string // what it holds, for messages: "lock", "permit"
	// usage is printed before the flags.
	usage string
	// flags defines the subcommand's own flags; open builds what hands out
	// the lease once the flags are parsed.
	flags func(fs *flag.FlagSet) func(b *dsync.Backend, name string, opts *locker.Options) (acquirer, error)
}

// acquirer is a Locker or a Semaphore, as dsync lock and dsync sem see them.
type acquirer interface {
	Acquire(ctx context.Context) (dsync.Lease, error)
	TryAcquire(ctx context.Context) (dsync.Lease, error)
}

var lockCommand = heldCommand{
	name: "lock", what: "lock",
	usage: "usage: dsync lock NAME [flags] -- CMD [ARGS...]\n\n" +
		"Runs CMD while holding the lock NAME, auto-extended; CMD gets DSYNC_KEY and DSYNC_TOKEN (the fencing token).",
	flags: func(*flag.FlagSet) func(*dsync.Backend, string, *locker.Options) (acquirer, error) {
		return func(b *dsync.Backend, name string, opts *locker.Options) (acquirer, error) {
			return locker.New(b, name, opts)
		}
	},
}

var semCommand = heldCommand{
	name: "sem", what: "permit",
	usage: "usage: dsync sem NAME --size N [flags] -- CMD [ARGS...]\n\n" +
		"Runs CMD while holding one of the N permits of the semaphore NAME, auto-extended; at most N commands\n" +
		"run at once across every machine using NAME. CMD gets DSYNC_KEY and DSYNC_TOKEN (the fencing token).",
	flags: func(fs *flag.FlagSet) func(*dsync.Backend, string, *locker.Options) (acquirer, error) {
		size := fs.Int("size", 0, "the number of permits (required; every user of NAME must agree)")
		return func(b *dsync.Backend, name string, opts *locker.Options) (acquirer, error) {
			if *size <= 0 {
				return nil, fmt.Errorf("--size must be given, and positive (got %d)", *size)
			}
			s, err := semaphore.New(b, name, *size, opts)
			if err != nil {
				return nil, err
			}
			return semAcquirer{s}, nil
		}
	},
}

// semAcquirer turns a Semaphore's permits into leases.
type semAcquirer struct{ s *semaphore.Semaphore }

func (a semAcquirer) Acquire(ctx context.Context) (dsync.Lease, error)    { return a.s.Acquire(ctx) }
func (a semAcquirer) TryAcquire(ctx context.Context) (dsync.Lease, error) { return a.s.TryAcquire(ctx) }

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runHeld(ctx, lockCommand, args, stdout, stderr)
}

func runSem(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runHeld(ctx, semCommand, args, stdout, stderr)
}

func runHeld(ctx context.Context, hc heldCommand, args []string, stdout, stderr io.Writer) int {
	fs := flagSet(hc.name, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, hc.usage)
		fmt.Fprintf(stderr, "Exit status: CMD's own; %d not acquired (--try); %d timed out (--timeout); %d %s lost while CMD ran (CMD was terminated); 2 usage or backend error.\n\n", exitNotAcquired, exitTimedOut, exitLost, hc.what)
		fs.PrintDefaults()
	}
	url := fs.String("url", os.Getenv("DSYNC_URL"), "backend URL (or $DSYNC_URL); see dsync url-help")
	ttl := fs.Duration("ttl", 0, "lease TTL (default: the URL's ttl, else 10s)")
	try := fs.Bool("try", false, "make one attempt; exit 3 if none is free")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long and exit 4 (default: wait forever)")
	grace := fs.Duration("grace", 10*time.Second, "after the "+hc.what+" is lost, time between SIGTERM and SIGKILL to CMD")
	maxHold := fs.Duration("max-hold", 0, "stop extending after this total hold time (default 1h; negative: no bound)")
	open := hc.flags(fs)
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
	prefix := "dsync " + hc.name + ": "
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%sunexpected argument %q before -- (flags go between NAME and --)\n", prefix, fs.Arg(0))
		return exitUsage
	}
	if *url == "" {
		fmt.Fprintln(stderr, prefix+"no backend: pass --url or set DSYNC_URL (see dsync url-help)")
		return exitUsage
	}
	if *grace < 0 || *timeout < 0 {
		fmt.Fprintln(stderr, prefix+"--grace and --timeout must not be negative")
		return exitUsage
	}

	b, code := openBackend(ctx, *url, stderr)
	if code != exitOK {
		return code
	}
	defer b.Close()
	a, err := open(b, name, &locker.Options{TTL: *ttl, MaxHold: *maxHold})
	if err != nil {
		fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
		return exitUsage
	}

	lease, code := acquireForCommand(ctx, a, *try, *timeout, prefix, stderr)
	if code != exitOK {
		return code
	}
	defer lease.Release(context.WithoutCancel(ctx))
	lease.AutoExtend()
	env := []string{"DSYNC_KEY=" + lease.Key(), "DSYNC_TOKEN=" + strconv.FormatUint(lease.Token(), 10)}
	return runUnderLease(lease, env, cmdArgs, *grace, prefix, hc.what, stdout, stderr)
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

func acquireForCommand(ctx context.Context, l acquirer, try bool, timeout time.Duration, prefix string, stderr io.Writer) (dsync.Lease, int) {
	if try {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
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
		fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(err))
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

// ending is a hold that ends: a lease, or a term of leadership.
type ending interface {
	Done() <-chan struct{}
	Err() error
}

// runUnderLease runs the command with env added to its environment,
// forwards dsync's signals to it, and terminates it (SIGTERM, then SIGKILL
// after grace) if the hold is lost; what names the hold in messages.
func runUnderLease(lease ending, env, argv []string, grace time.Duration, prefix, what string, stdout, stderr io.Writer) int {
	// The command's output is copied by exec's goroutines unless it is a
	// file; dsync's own messages go to the same stderr.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), env...)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "%s%v\n", prefix, err)
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
				fmt.Fprintf(stderr, "%s%s\n", prefix, oneLine(lease.Err()))
				return exitLost
			}
			return exitStatus(err)
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-leaseDone:
			leaseDone = nil
			if errors.Is(lease.Err(), dsync.ErrLeaseLost) {
				lost = true
				fmt.Fprintf(stderr, "%s%s lost; sending SIGTERM to the command, SIGKILL in %v\n", prefix, what, grace)
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
