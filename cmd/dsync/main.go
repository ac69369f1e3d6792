// Command dsync runs commands under distributed locks and demonstrates the
// dsync backends.
//
//	dsync lock NAME [--url URL] [--try | --timeout D] [--ttl D] -- CMD [ARGS...]
//	dsync sem NAME --size N [--url URL] [--try | --timeout D] [--ttl D] -- CMD [ARGS...]
//	dsync elect NAME --id ID [--url URL] [--once] [--ttl D] -- CMD [ARGS...]
//	dsync leader NAME [--url URL] [--watch]
//	dsync url-help
//
// The backend comes from --url or the DSYNC_URL environment variable. Exit
// status 2 means bad usage, a malformed URL or an unreachable backend; the
// message is one line naming the problem.
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
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the demo found a violation, or an operation failed
	exitUsage = 2 // bad flags, URL or unreachable backend
)

func main() {
	// go-redis logs every failed dial of a dead node on its own; dsync
	// reports failures through errors, so the CLI keeps its output clean.
	goredis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"lock", "run a command while holding a lock: dsync lock NAME [flags] -- CMD [ARGS...]", runLock},
		{"sem", "run a command while holding a semaphore permit: dsync sem NAME --size N [flags] -- CMD [ARGS...]", runSem},
		{"elect", "run a command only while leading an election: dsync elect NAME --id ID [flags] -- CMD [ARGS...]", runElect},
		{"leader", "print the current leader of an election, or follow it with --watch: dsync leader NAME [--watch]", runLeader},
		{"url-help", "list the backend URL schemes and their options", runURLHelp},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "dsync: unknown command %q (run dsync --help)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dsync COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The backend comes from --url or $DSYNC_URL; see dsync url-help.")
}

// flagSet returns a FlagSet that reports errors on stderr without exiting.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dsync "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
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

// openBackend opens url, printing one redacted line on failure.
func openBackend(ctx context.Context, url string, stderr io.Writer) (*dsync.Backend, int) {
	b, err := dsync.Open(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "dsync: %s\n", oneLine(err))
		return nil, exitUsage
	}
	return b, exitOK
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "dsync: ")), " ")
}

func runURLHelp(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("url-help", stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fmt.Fprintln(stdout, "Backend URLs (--url or $DSYNC_URL):")
	for _, s := range dsync.Schemes() {
		fmt.Fprintf(stdout, "\n  %s://  %s\n      e.g. %s\n", s.Name, s.Summary, s.Example)
		for _, o := range s.Options {
			printOption(stdout, o)
		}
	}
	fmt.Fprintln(stdout, "\n  Options every scheme accepts:")
	for _, o := range dsync.CommonOptions {
		printOption(stdout, o)
	}
	return exitOK
}

func printOption(w io.Writer, o dsync.OptionDoc) {
	def := ""
	if o.Default != "" {
		def = " (default " + o.Default + ")"
	}
	fmt.Fprintf(w, "      %-16s %s%s\n", o.Name, o.Doc, def)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
