package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/locker"
)

func holderFlags() *cmdFlags {
	return newFlags("holder", "usage: dsync holder NAME [--size N] [--json] [flags]", `
Prints who holds the lock NAME now: the value its holder stored (dsync lock stores "HOST pid PID", an
election's leader its candidate ID) and the TTL left as the server reports it. With --size N > 1, NAME
is a semaphore of N permits, and the holder shown is the one whose permit expires last. Fencing tokens
are not shown: the backends do not report the holder's.

With --json: {"name":NAME,"held":true|false,"value":VALUE,"ttl_ms":TTL}.`,
		`  0  held
  1  free
  2  usage error, bad URL or backend unreachable`)
}

// holderLine is dsync holder --json's output.
type holderLine struct {
	Name  string  `json:"name"`
	Held  bool    `json:"held"`
	Value string  `json:"value,omitempty"`
	TTLms float64 `json:"ttl_ms,omitempty"`
}

func runHolder(ctx context.Context, args []string, io stdio) int {
	c := holderFlags()
	var url string
	c.url(&url)
	size := c.Int("size", 1, "the semaphore's number of permits; 1 = a lock")
	asJSON := c.Bool("json", false, "print one JSON object")
	p, name, code, ok := c.parseNamed(args, io)
	if !ok {
		return code
	}
	switch {
	case p.hasCmd:
		return c.usageError(io.err, "dsync holder runs no command")
	case url == "":
		return c.usageError(io.err, noBackend)
	case *size < 1:
		return c.usageError(io.err, "--size must be positive (got %d)", *size)
	}
	b, code := c.open(ctx, url, io)
	if b == nil {
		return code
	}
	defer b.Close()
	// A locker's Holder reads whatever holds its key: for a semaphore's
	// name, the permit that expires last.
	l, err := locker.New(b, name, nil)
	if err != nil {
		fmt.Fprintf(io.err, "dsync holder: %s\n", oneLine(err))
		return exitUsage
	}
	info, err := l.Holder(ctx)
	held := err == nil
	if err != nil && !errors.Is(err, dsync.ErrNotHeld) {
		fmt.Fprintf(io.err, "dsync holder: %s\n", oneLine(err))
		return exitUsage
	}
	switch {
	case *asJSON:
		line := holderLine{Name: name, Held: held}
		if held {
			line.Value, line.TTLms = string(info.Value), float64(info.TTL.Microseconds())/1000
		}
		_ = json.NewEncoder(io.out).Encode(line)
	case held:
		fmt.Fprintf(io.out, "%s\t%v left\n", info.Value, info.TTL.Round(time.Millisecond))
	default:
		fmt.Fprintln(io.out, "free")
	}
	if !held {
		return exitFail
	}
	return exitOK
}
