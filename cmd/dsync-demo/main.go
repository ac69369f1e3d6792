// Command dsync-demo shows the dsync backends at work on servers it starts
// itself, and soaks them under faults. It links the embedded etcd server and
// the test tooling, which the operator tool, cmd/dsync, never does.
//
//	dsync-demo [-v] [--no-install] [--url URL] [--workers N] [--rounds N] [--work D] [--key K] [--size N]
//	dsync-demo check [--url URL] [--duration D] [--primitive lock|sem|elect] [--faults F,...] [--workers N] [--report FILE] [--json]
//
// Without --url (or $DSYNC_URL), both start single Redis, Redlock (5
// masters) and a 3-member etcd cluster, and stop them when done; the demo
// first installs a missing redis-server with apt-get as scripts/test does
// (as root; --no-install skips it). The demo tells its story in about a
// screen; -v adds every acquisition and release. Exit status:
// 0 every check passed, 1 a violation or a failed operation, 2 bad usage, a
// malformed URL or an unreachable backend.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"
	_ "github.com/dsync-dev/dsync/backends/memory"
	_ "github.com/dsync-dev/dsync/backends/redis"
	_ "github.com/dsync-dev/dsync/redlock"
	"github.com/dsync-dev/dsync/semaphore"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // a violation was found, or an operation failed
	exitUsage = 2 // bad flags, URL or unreachable backend
)

func main() {
	// go-redis logs every failed dial of a dead node (the demo kills
	// some); failures reach the output through errors instead.
	goredis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the demo, or the soak when args start with "check".
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			return runCheck(ctx, args[1:], stdout, stderr)
		case "demo":
			args = args[1:]
		case "help":
			args = []string{"--help"}
		}
	}
	return runDemo(ctx, args, stdout, stderr)
}

// flagSet returns a FlagSet that reports errors on stderr without exiting,
// and its help on stdout.
func flagSet(name string, stdout, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stdout, usage)
		fmt.Fprintln(stdout)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	return fs
}

// parseFlags parses args, mapping -h to status 0 and bad flags to exitUsage.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// urlFlag defines --url, whose default is $DSYNC_URL read after parsing,
// so that no help text ever shows its value (it may hold a password).
func urlFlag(fs *flag.FlagSet, doc string) func() string {
	url := fs.String("url", "", doc+" (default $DSYNC_URL)")
	return func() string {
		if *url != "" {
			return *url
		}
		return os.Getenv("DSYNC_URL")
	}
}

// openBackend opens url, printing one redacted line on failure.
func openBackend(ctx context.Context, url string, stderr io.Writer) (*dsync.Backend, int) {
	b, err := dsync.Open(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "dsync-demo: %s\n", oneLine(err))
		return nil, exitUsage
	}
	return b, exitOK
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "dsync: ")), " ")
}

// acquirer is a Locker or a Semaphore, as the demo's workers see them.
type acquirer interface {
	Acquire(ctx context.Context) (dsync.Lease, error)
	TryAcquire(ctx context.Context) (dsync.Lease, error)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// semAcquirer turns a Semaphore's permits into leases.
type semAcquirer struct{ s *semaphore.Semaphore }

func (a semAcquirer) Acquire(ctx context.Context) (dsync.Lease, error)    { return a.s.Acquire(ctx) }
func (a semAcquirer) TryAcquire(ctx context.Context) (dsync.Lease, error) { return a.s.TryAcquire(ctx) }
