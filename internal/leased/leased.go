// Package leased runs a function while a hold lasts: the one
// run-while-held helper under dsync.Do and leader.Run. It sits below
// package dsync, which cannot be imported here, so it defines the loss
// sentinel that dsync re-exports as ErrLeaseLost.
package leased

import (
	"context"
	"errors"
	"fmt"

	"github.com/dsync-dev/dsync/internal/telemetry"
)

// ErrLeaseLost is dsync.ErrLeaseLost: a hold ended without Release.
var ErrLeaseLost = errors.New("dsync: lease lost")

// Hold is what Run needs of a hold: the methods of dsync.Lease it calls,
// with their meaning. Every dsync.Lease has them.
type Hold interface {
	AutoExtend()
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// Run runs fn while h is held: it starts auto-extension, cancels fn's
// context with h's error as cause when h is lost, and releases h when fn
// returns, or panics (the panic then goes on). A loss while fn ran is
// recorded as an event on the span in ctx. If h was lost while fn ran, the
// error matches ErrLeaseLost even when fn returned nil; otherwise it is
// fn's error joined with any release error. It returns once the goroutine
// that watches h has stopped.
func Run(ctx context.Context, h Hold, fn func(ctx context.Context) error) (err error) {
	h.AutoExtend()
	runCtx, cancel := context.WithCancelCause(ctx)
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-h.Done():
			cancel(h.Err())
		case <-stopWatch:
		}
	}()
	var fnErr error
	defer func() {
		close(stopWatch)
		<-watchDone
		cancel(nil)
		relErr := h.Release(ctx)
		switch lost := h.Err(); {
		case !errors.Is(lost, ErrLeaseLost):
			err = errors.Join(fnErr, relErr)
		case fnErr != nil:
			telemetry.LostWhileRunning(ctx, lost)
			err = errors.Join(fnErr, lost)
		default:
			telemetry.LostWhileRunning(ctx, lost)
			err = fmt.Errorf("%w (while the function ran)", lost)
		}
	}()
	fnErr = fn(runCtx)
	return nil // set by the deferred release
}
