package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// cmdFlags is a subcommand's flags with dsync's conventions: flags before or
// after the positional arguments (NAME) and up to "--"; defaults from
// environment variables, named in the help but never shown by value; help
// on stdout; usage errors as one line naming the problem, then the usage,
// on stderr, with status 2.
type cmdFlags struct {
	*flag.FlagSet
	name     string   // the subcommand: "lock"
	synopsis string   // "usage: ..." lines
	about    string   // what the subcommand does, after the synopsis
	status   string   // the exit statuses, after the flags
	env      []envVar // in the order defined
	explicit map[string]bool
}

// envVar is a flag whose default comes from an environment variable.
type envVar struct{ flag, name string }

func newFlags(name, synopsis, about, status string) *cmdFlags {
	fs := flag.NewFlagSet("dsync "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by parse
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, name: name, synopsis: synopsis, about: about, status: status}
}

// fromEnv makes the environment variable name the default of the flag,
// used when the flag is not given.
func (c *cmdFlags) fromEnv(flagName, name string) {
	c.env = append(c.env, envVar{flagName, name})
}

// url defines --url, from $DSYNC_URL.
func (c *cmdFlags) url(p *string) {
	c.StringVar(p, "url", "", "backend `URL` (default $DSYNC_URL); see dsync url-help")
	c.fromEnv("url", "DSYNC_URL")
}

// ttl defines --ttl, from $DSYNC_TTL.
func (c *cmdFlags) ttl(p *time.Duration, what string) {
	c.DurationVar(p, "ttl", 0, what+" TTL; 0 = the default: the URL's ttl option, else 10s")
	c.fromEnv("ttl", "DSYNC_TTL")
}

// printHelp writes the whole help: synopsis, description, flags,
// environment variables and exit statuses.
func (c *cmdFlags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n%s\n\nFlags:\n", c.synopsis, strings.TrimSpace(c.about))
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(io.Discard)
	if len(c.env) > 0 {
		fmt.Fprintln(w, "\nEnvironment (used when the flag is not given):")
		for _, e := range c.env {
			fmt.Fprintf(w, "  %-16s --%s\n", e.name, e.flag)
		}
	}
	if c.status != "" {
		fmt.Fprintf(w, "\nExit status:\n%s\n", strings.TrimRight(c.status, "\n"))
	}
}

// usageError prints "dsync NAME: problem" and the synopsis on w and returns
// exitUsage. The problem must not quote the URL.
func (c *cmdFlags) usageError(w io.Writer, format string, args ...any) int {
	fmt.Fprintf(w, "dsync %s: %s\n", c.name, fmt.Sprintf(format, args...))
	fmt.Fprintf(w, "%s\nRun dsync %s --help for the flags, environment and exit statuses.\n", c.synopsis, c.name)
	return exitUsage
}

// parsed is what parse found in a subcommand's arguments.
type parsed struct {
	pos    []string // positional arguments before "--"
	cmd    []string // after "--"
	hasCmd bool     // "--" was given
}

// parse parses args, flags anywhere before "--", then applies the
// environment defaults of the flags not given. When it returns ok false,
// it has printed the help (status 0) or a usage error (status 2).
func (c *cmdFlags) parse(args []string, io stdio) (p parsed, code int, ok bool) {
	before := args
	for i, a := range args {
		if a == "--" {
			before, p.cmd, p.hasCmd = args[:i], args[i+1:], true
			break
		}
	}
	if len(before) == 1 && before[0] == "help" && !p.hasCmd {
		c.printHelp(io.out)
		return p, exitOK, false
	}
	for rest := before; ; {
		if err := c.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.printHelp(io.out)
				return p, exitOK, false
			}
			return p, c.usageError(io.err, "%s", err), false
		}
		rest = c.Args()
		if len(rest) == 0 {
			break
		}
		p.pos, rest = append(p.pos, rest[0]), rest[1:]
	}
	c.explicit = map[string]bool{}
	c.Visit(func(f *flag.Flag) { c.explicit[f.Name] = true })
	for _, e := range c.env {
		v := os.Getenv(e.name)
		if c.explicit[e.flag] || v == "" {
			continue
		}
		if err := c.Set(e.flag, v); err != nil {
			// The value is not quoted: it may be a secret.
			return p, c.usageError(io.err, "$%s is not a valid value for --%s", e.name, e.flag), false
		}
	}
	return p, 0, true
}

// parseNamed parses args (see parse) and checks that they name exactly one
// NAME (see nameArg): the start of every subcommand that takes a NAME.
func (c *cmdFlags) parseNamed(args []string, io stdio) (p parsed, name string, code int, ok bool) {
	if p, code, ok = c.parse(args, io); !ok {
		return p, "", code, false
	}
	name, code, ok = c.nameArg(p, io)
	return p, name, code, ok
}

// noBackend is the usage error of a subcommand given no backend URL.
const noBackend = "no backend: pass --url or set DSYNC_URL (see dsync url-help)"

// open opens the backend at url, or prints one redacted line naming the
// problem and returns exitUsage, or exitUnavailable for a subcommand that
// acquires (lock, sem, elect) when the backend could not be reached. A
// Redlock of fewer than 3 nodes is opened with a warning, unless -q. The
// caller closes the backend.
func (c *cmdFlags) open(ctx context.Context, url string, io stdio) (*dsync.Backend, int) {
	b, err := dsync.Open(ctx, url)
	if err != nil {
		fmt.Fprintf(io.err, "dsync %s: %s\n", c.name, oneLine(err))
		if errors.Is(err, dsync.ErrUnavailable) && !errors.Is(err, dsync.ErrInvalid) && (c.name == "lock" || c.name == "sem" || c.name == "elect") {
			return nil, exitUnavailable
		}
		return nil, exitUsage
	}
	if q := c.Lookup("q"); q == nil || q.Value.String() != "true" {
		if w := fewNodes(url); w != "" {
			fmt.Fprintf(io.err, "dsync %s: warning: %s\n", c.name, w)
		}
	}
	return b, exitOK
}

// fewNodes returns a warning for a redlock URL of fewer than 3 nodes, or
// "" for any other URL.
func fewNodes(rawURL string) string {
	u, err := neturl.Parse(rawURL)
	if err != nil || u.Scheme != "redlock" {
		return ""
	}
	n := len(u.Query()["addr"])
	if u.Host != "" {
		hosts, err := backends.HostList(u.Host, "")
		if err != nil {
			return ""
		}
		n += len(hosts)
	}
	if n == 0 || n >= 3 {
		return ""
	}
	return fmt.Sprintf("redlock over %d node(s): its quorum of %d tolerates no node down; use at least 3 masters", n, n/2+1)
}

// name checks that p holds exactly one positional argument, a non-empty
// NAME, and returns it; otherwise it prints a usage error.
func (c *cmdFlags) nameArg(p parsed, io stdio) (string, int, bool) {
	switch {
	case len(p.pos) == 0:
		return "", c.usageError(io.err, "NAME is missing"), false
	case len(p.pos) > 1:
		return "", c.usageError(io.err, "unexpected argument %q after NAME %q (a command goes after --)", p.pos[1], p.pos[0]), false
	case p.pos[0] == "":
		return "", c.usageError(io.err, "NAME is empty"), false
	}
	return p.pos[0], 0, true
}
