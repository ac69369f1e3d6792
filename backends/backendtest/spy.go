package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
)

// spyDriver wraps a backend's driver. It counts the calls that may make
// I/O (Acquire, Refresh, Release, Holder, WatchReleases; CheckTTL,
// Capabilities and Close make none), and can cut the link to the server:
// every call then fails at once, as with a refused connection (linkCut), or
// waits for its context to end or for the driver's own request timeout
// (spyRequestTimeout, which every driver keeps: see backends.Driver), as
// with a server that does not answer (linkSilent). A call made while the
// link is cut never reaches the server.
type spyDriver struct {
	backends.Driver
	calls atomic.Int64
	link  atomic.Int32 // linkUp, linkCut or linkSilent
}

const (
	linkUp int32 = iota
	linkCut
	linkSilent
)

var errCut = errors.New("backendtest: cut off from the server")

// spyOn returns a backend over a spyDriver wrapping a new backend's
// driver, with its name and defaults; both are closed at the end of the
// test.
func (s *suite) spyOn(t testing.TB) (*dsync.Backend, *spyDriver) {
	t.Helper()
	inner := s.backend(t)
	sp := &spyDriver{Driver: lease.Driver(inner)}
	b, err := dsync.NewBackend(sp, &dsync.BackendOptions{Name: inner.String(), Defaults: inner.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, sp
}

// call counts a call and reports the error it gets without reaching the
// server, if the link is cut.
func (d *spyDriver) call(ctx context.Context) error {
	d.calls.Add(1)
	switch d.link.Load() {
	case linkCut:
		return errCut
	case linkSilent:
		t := time.NewTimer(spyRequestTimeout)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("backendtest: no answer from the server: %w", ctx.Err())
		case <-t.C:
			return fmt.Errorf("backendtest: no answer from the server within the request timeout: %w", context.DeadlineExceeded)
		}
	}
	return nil
}

// spyRequestTimeout is the spy's own bound on a call to a silent server.
const spyRequestTimeout = 250 * time.Millisecond

func (d *spyDriver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if err := d.call(ctx); err != nil {
		return backends.Grant{}, err
	}
	return d.Driver.Acquire(ctx, req)
}

func (d *spyDriver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := d.call(ctx); err != nil {
		return err
	}
	return d.Driver.Refresh(ctx, key, token, ttl)
}

func (d *spyDriver) Release(ctx context.Context, key, token string) error {
	if err := d.call(ctx); err != nil {
		return err
	}
	return d.Driver.Release(ctx, key, token)
}

func (d *spyDriver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if err := d.call(ctx); err != nil {
		return backends.HolderInfo{}, err
	}
	return d.Driver.Holder(ctx, key)
}

func (d *spyDriver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if err := d.call(ctx); err != nil {
		return nil, err
	}
	return d.Driver.WatchReleases(ctx, key)
}

// Health reports the server unreachable while the link is cut or silent.
func (d *spyDriver) Health(ctx context.Context) (backends.Health, error) {
	if err := d.call(ctx); err != nil {
		return backends.Health{Reason: err.Error(), Nodes: []backends.NodeHealth{{Addr: "spy", Err: err}}}, nil
	}
	return d.Driver.Health(ctx)
}
