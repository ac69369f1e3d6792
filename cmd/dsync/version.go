package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// runVersion prints the module version and the VCS revision the binary was
// built from, as debug.ReadBuildInfo reports them.
func runVersion(_ context.Context, args []string, io stdio) int {
	c := newFlags("version", "usage: dsync version (or dsync --version)",
		"Prints the module path and version, and the VCS revision, time and state the binary was built from.", "  0")
	p, code, ok := c.parse(args, io)
	if !ok {
		return code
	}
	if len(p.pos) > 0 || p.hasCmd {
		return c.usageError(io.err, "dsync version takes no arguments")
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(io.out, "dsync: no build information in this binary")
		return exitOK
	}
	rev, modified, at := "unknown", "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		case "vcs.time":
			at = " " + s.Value
		}
	}
	fmt.Fprintf(io.out, "dsync %s %s\nrevision %s%s%s\n%s\n", bi.Main.Path, bi.Main.Version, rev, modified, at, bi.GoVersion)
	return exitOK
}
