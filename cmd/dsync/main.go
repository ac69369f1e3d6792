// Command dsync is the operator's tool: it runs a command while holding a
// distributed lock, a semaphore permit or the leadership of an election,
// holds a lock for a shell script, shows who holds a lock or leads an
// election, and reports whether a backend can serve. It links client code only; the demo and the embedded-server soak
// are cmd/dsync-demo.
//
//	dsync lock NAME [flags] [-- CMD [ARGS...]]
//	dsync sem NAME --size N [flags] [-- CMD [ARGS...]]
//	dsync elect NAME [--id ID] [flags] -- CMD [ARGS...]
//	dsync leader NAME [--watch] [--json] [flags]
//	dsync holder NAME [--size N] [--json] [flags]
//	dsync health [--json] [--timeout D] [flags]
//	dsync url-help
//	dsync --version
//
// Flags go before or after NAME. The backend comes from --url or $DSYNC_URL,
// whose value no help or error text ever shows. Help goes to stdout with
// status 0; a usage error prints one line naming the problem, then the usage,
// with status 2.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	_ "github.com/dsync-dev/dsync/backends/etcd"
	_ "github.com/dsync-dev/dsync/backends/memory"
	_ "github.com/dsync-dev/dsync/backends/redis"
	_ "github.com/dsync-dev/dsync/redlock"
)

// Exit statuses of dsync itself; a command run under a hold exits with its
// own status, or 128+signal when a signal ended it, as shells report.
const (
	exitOK          = 0
	exitFail        = 1 // holder: the lock is free; leader: reading failed; health: cannot serve
	exitUsage       = 2 // bad flags or URL (or unreachable backend: holder, leader)
	exitNotAcquired = 3 // --try and the lock is held (every permit taken)
	exitTimedOut    = 4 // --timeout passed before the hold was acquired
	exitLost        = 5 // the hold was lost while held; CMD was stopped
	exitUnavailable = 6 // lock, sem, elect: the backend could not decide (unreachable, no quorum)
	exitNoLeader    = 3 // dsync leader: the election has no leader
	exitNoCommand   = 127
)

func main() {
	// go-redis's process-wide logger is the application's to set: the
	// library gives it no failed dial to print, and the tool silences
	// whatever else go-redis might print, reporting failures through errors.
	goredis.SetLogger(quietLogger{})
	ctx, stop := signalContext(context.Background())
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stdio is where a subcommand reads and writes. out and err are safe for
// concurrent use (see lockWriter).
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) int
}

func commands() []command {
	return []command{
		{"lock", "run a command while holding a lock, or hold it until a signal or EOF on stdin", runLock},
		{"sem", "the same with one of the N permits of a counting semaphore", runSem},
		{"elect", "run a command only while leading an election, and campaign again after it", runElect},
		{"leader", "print the current leader of an election, or follow it with --watch", runLeader},
		{"holder", "print who holds a lock (or a semaphore's permits) and the TTL left", runHolder},
		{"health", "report whether the backend can serve now, server by server (for readiness probes)", runHealth},
		{"url-help", "list the backend URL schemes and their options", runURLHelp},
		{"version", "print the module version and VCS revision (also --version)", runVersion},
	}
}

// run runs the subcommand args[0] and returns the exit status.
func run(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	std := stdio{in: in, out: lockWriter(out), err: lockWriter(errw)}
	if len(args) == 0 {
		fmt.Fprintln(std.err, "dsync: no command given")
		usage(std.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(std.out)
		return exitOK
	case "help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, in, out, errw)
		}
		usage(std.out)
		return exitOK
	case "-version", "--version":
		return runVersion(ctx, nil, std)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], std)
		}
	}
	fmt.Fprintf(std.err, "dsync: unknown command %q\n", args[0])
	usage(std.err)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dsync COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The backend comes from --url or $DSYNC_URL; see dsync url-help. dsync help COMMAND (or dsync COMMAND --help)")
	fmt.Fprintln(w, "describes a command, its flags, environment variables and exit statuses.")
}

// oneLine is err's message without the "dsync: " prefix, on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "dsync: ")), " ")
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
