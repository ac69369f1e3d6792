package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// libraryModule is the root of the library modules the tool is built on.
const libraryModule = "github.com/dsync-dev/dsync"

// runVersion prints the module version, the versions of the dsync library
// modules it was built with, and the VCS revision it was built from, as
// debug.ReadBuildInfo reports them.
func runVersion(_ context.Context, args []string, io stdio) int {
	c := newFlags("version", "usage: dsync version (or dsync --version)",
		"Prints the module path and version, the dsync library modules it uses, and the VCS revision, time and state the binary was built from.", "  0")
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
	fmt.Fprintf(io.out, "dsync %s %s\n", bi.Main.Path, bi.Main.Version)
	for _, d := range bi.Deps {
		if d.Path == libraryModule || strings.HasPrefix(d.Path, libraryModule+"/") {
			fmt.Fprintf(io.out, "uses %s %s\n", d.Path, d.Version)
		}
	}
	fmt.Fprintf(io.out, "revision %s%s%s\n%s\n", rev, modified, at, bi.GoVersion)
	return exitOK
}
