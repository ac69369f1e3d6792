package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// Variables so that a test can play a machine without redis-server.
var (
	lookupRedis  = redistest.Lookup
	canAptGet    = func() bool { _, err := exec.LookPath("apt-get"); return err == nil && os.Geteuid() == 0 }
	installRedis = aptInstallRedis
)

// ensureRedis makes redis-server available as scripts/test does: with
// apt-get, when running as root and noInstall is false, saying so first.
// It returns "" when redis-server is there, else the one line that says
// what the demo skips and why.
func ensureRedis(ctx context.Context, out io.Writer, noInstall bool) string {
	if _, err := lookupRedis(); err == nil {
		return ""
	}
	const skipped = "Redlock and single Redis skipped: redis-server is not installed"
	switch {
	case noInstall:
		return skipped + " (--no-install; apt-get install redis-server)"
	case !canAptGet():
		return skipped + " (not root or no apt-get here; sudo apt-get install redis-server)"
	}
	fmt.Fprintln(out, "redis-server is not installed: installing it with apt-get, as scripts/test does (--no-install skips this)")
	start := time.Now()
	if err := installRedis(ctx); err != nil {
		return fmt.Sprintf("%s (apt-get failed: %s)", skipped, err)
	}
	if _, err := lookupRedis(); err != nil {
		return skipped + " (apt-get ran, yet no redis-server was found)"
	}
	fmt.Fprintf(out, "installed redis-server in %v\n", time.Since(start).Round(100*time.Millisecond))
	return ""
}

// aptInstallRedis runs scripts/test's two commands, quietly; an error
// quotes the last line apt-get wrote.
func aptInstallRedis(ctx context.Context) error {
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", "redis-server"},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			return fmt.Errorf("apt-get %s: %v: %s", args[0], err, lines[len(lines)-1])
		}
	}
	return nil
}
