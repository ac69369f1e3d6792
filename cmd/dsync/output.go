package main

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// reporter writes dsync's own lines on stderr, prefixed "dsync CMD: ":
// notices unless quiet (-q), events only when verbose (-v). Usage and
// backend errors do not go through it: they are always printed.
type reporter struct {
	w              io.Writer
	prefix         string
	quiet, verbose bool
}

// notice reports what happened to the hold (lost, timed out, leading...).
func (r reporter) notice(format string, args ...any) {
	if !r.quiet {
		fmt.Fprintf(r.w, r.prefix+format+"\n", args...)
	}
}

// event reports an acquisition, extension or release, with -v.
func (r reporter) event(format string, args ...any) {
	if r.verbose && !r.quiet {
		fmt.Fprintf(r.w, r.prefix+format+"\n", args...)
	}
}

// lockWriter returns w as is when it is a file (the command then writes to
// it directly, and each of dsync's lines is one write), and otherwise w
// behind a mutex, shared by dsync and the copier of the command's output.
func lockWriter(w io.Writer) io.Writer {
	switch w.(type) {
	case *os.File, *lockedWriter:
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serialises writes.
type lockedWriter struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}
