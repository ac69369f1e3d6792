package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsync-dev/dsync"
)

// holdUntilDone is dsync lock (and sem) without a command: it prints the
// token on stdout, then holds lease until ctx ends (SIGINT, SIGTERM), stdin
// reaches EOF, or the lease is lost. It returns 0, or exitLost after a loss;
// the caller releases the lease.
func holdUntilDone(ctx context.Context, lease dsync.Lease, what string, r reporter, io stdio) int {
	fmt.Fprintln(io.out, lease.Token())
	eof, stop := watchEOF(io.in)
	defer stop()
	select {
	case <-ctx.Done():
		r.event("%s; releasing", context.Cause(ctx))
	case <-eof:
		r.event("EOF on stdin; releasing")
	case <-lease.Done():
		if errors.Is(lease.Err(), dsync.ErrLeaseLost) {
			r.notice("%s lost (%s)", what, oneLine(lease.Err()))
			return exitLost
		}
	}
	return exitOK
}

// watchEOF returns a channel closed when in reaches EOF (or fails), and a
// function that stops the watch and awaits its goroutine. When in is
// /dev/null, the channel is never closed: a background job of a script
// gets /dev/null as stdin, and must hold until a signal.
func watchEOF(in io.Reader) (eof <-chan struct{}, stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	if isDevNull(in) {
		return done, func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		f, isFile := in.(*os.File)
		buf := make([]byte, 4096)
		for {
			// A blocking read on a file cannot be interrupted: poll
			// first, so that stop is noticed within the poll's timeout.
			if isFile && !readable(f, quit) {
				return
			}
			if _, err := in.Read(buf); err != nil {
				return
			}
		}
	})
	return done, func() { close(quit); wg.Wait() }
}

// readable waits until f has input (or EOF or an error) and reports true, or
// until quit is closed and reports false.
func readable(f *os.File, quit <-chan struct{}) bool {
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	for {
		select {
		case <-quit:
			return false
		default:
		}
		n, err := unix.Poll(fds, 100)
		if errors.Is(err, syscall.EINTR) || (err == nil && n == 0) {
			continue
		}
		return true
	}
}

// isDevNull reports whether in is the null device.
func isDevNull(in io.Reader) bool {
	f, ok := in.(*os.File)
	if !ok {
		return false
	}
	st, err1 := f.Stat()
	null, err2 := os.Stat(os.DevNull)
	return err1 == nil && err2 == nil && os.SameFile(st, null)
}

// watchExtensions reports, with -v, each extension of lease: the library
// offers no event for it, so it watches the lease's expiry move later. The
// returned function stops the watch and awaits it.
func watchExtensions(lease dsync.Lease, r reporter) (stop func()) {
	if !r.verbose || r.quiet {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		last := lease.Expires()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-lease.Done():
				return
			case <-tick.C:
				if e := lease.Expires(); e.After(last) {
					last = e
					r.event("extended %q, valid for %v", lease.Key(), lease.Validity().Round(time.Millisecond))
				}
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}
