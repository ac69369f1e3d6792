package leader

import (
	"context"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
)

// Leadership is one term of leadership (dsync.Leadership), kept alive by
// renewing the election's lease every RenewInterval until Resign or loss.
// It is safe for concurrent use.
type Leadership struct {
	lease *lease.Lease
	c     *candidacy
}

var _ dsync.Leadership = (*Leadership)(nil)

// The tests and tools of this module that act on a term's hold below the
// lease layer find its token through lease.HoldToken.
func init() {
	lease.LeadershipLease = func(l dsync.Leadership) *lease.Lease {
		if l, ok := l.(*Leadership); ok {
			return l.lease
		}
		return nil
	}
}

// Term implements dsync.Leadership: the lease's fencing token, strictly
// greater than the term of every earlier leader of the election, as far as
// the backend's fencing can promise (see the README's guarantees table).
// Zero on a backend without fencing (Capabilities().Fencing false).
func (l *Leadership) Term() uint64 { return l.lease.Token() }

// Done implements dsync.Leadership: it is closed when the term ends, by
// Resign or by loss.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err implements dsync.Leadership: nil while leading, dsync.ErrReleased
// after Resign, an error matching dsync.ErrLeaseLost after loss (a
// renewal found the hold gone, or renewals failed until the lease's
// validity ran out).
func (l *Leadership) Err() error { return l.lease.Err() }

// Expires is the local time until which leadership is safe to rely on,
// moved forward by every renewal (dsync.Lease.Expires).
func (l *Leadership) Expires() time.Time { return l.lease.Expires() }

// Resign implements dsync.Leadership: it ends the term and releases the
// election's lease at once, so that a waiting candidate takes over without
// waiting for the TTL (the backend's release notice wakes it). If ctx is
// already done it still tries once on a fresh context bounded by the
// release timeout. It returns an error matching dsync.ErrNotHeld if the term
// had already ended (resigned, or lost: the error then wraps the loss),
// and the backend's error if the release failed; the term has ended
// either way, and the same candidate may campaign again.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.lease.Release(ctx)
	l.c.unregister()
	return err
}
