package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalError is the cause of the context signalContext cancels.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// signalContext returns a context cancelled, with a signalError as its
// cause, when the process gets SIGINT or SIGTERM. stop stops listening,
// awaits the listener and cancels the context.
func signalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sigs:
			cancel(signalError{s.(syscall.Signal)})
		case <-done:
		}
	})
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		cancel(nil)
	}
}

// interrupted returns the exit status of a wait that ctx's end cut short:
// 128+signal, as a shell reports a process a signal ended; 130 (SIGINT)
// when ctx ended for another reason.
func interrupted(ctx context.Context) int {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		return 128 + int(se.sig)
	}
	return 128 + int(syscall.SIGINT)
}
