package main

import (
	"context"
	"fmt"
	"io"

	"github.com/dsync-dev/dsync/backends"
)

func runURLHelp(_ context.Context, args []string, std stdio) int {
	c := newFlags("url-help", "usage: dsync url-help", "Lists the backend URL schemes (for --url or $DSYNC_URL) and their query options.", "  0")
	p, code, ok := c.parse(args, std)
	if !ok {
		return code
	}
	if len(p.pos) > 0 || p.hasCmd {
		return c.usageError(std.err, "dsync url-help takes no arguments")
	}
	fmt.Fprintln(std.out, "Backend URLs (--url or $DSYNC_URL):")
	for _, s := range backends.Schemes() {
		fmt.Fprintf(std.out, "\n  %s://  %s\n      e.g. %s\n", s.Name, s.Summary, s.Example)
		for _, o := range s.Options {
			printOption(std.out, o)
		}
	}
	fmt.Fprintln(std.out, "\n  Options every scheme accepts:")
	for _, o := range backends.CommonOptions() {
		printOption(std.out, o)
	}
	fmt.Fprintln(std.out, "\n  Hosts: host:port, an IPv6 address in brackets ([::1]:6379); a port is 1..65535.")
	fmt.Fprintln(std.out, "  A host is required: an empty one is an error, not localhost. redis:// and etcd://")
	fmt.Fprintln(std.out, "  default the port (6379, 2379); redlock:// needs one on every node (IPv6 nodes as addr=).")
	return exitOK
}

func printOption(w io.Writer, o backends.OptionDoc) {
	def := ""
	if o.Default != "" {
		def = " (default " + o.Default + ")"
	}
	fmt.Fprintf(w, "      %-16s %s%s\n", o.Name, o.Doc, def)
}
