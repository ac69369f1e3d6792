package dsync

import (
	"errors"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/leased"
)

// Sentinel errors. Every error dsync returns matches one of these with
// errors.Is, through any wrapping (including per-node errors aggregated
// across Redlock nodes). Errors caused by a done context also match the
// context's error: a cancelled Acquire satisfies both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, context.Canceled).
//
// A failed acquisition (Acquire, TryAcquire, Campaign) that is not final
// (ErrInvalid, ErrClosed, ErrUnsupported) matches ErrNotAcquired: nothing
// is held, and a later attempt may succeed. It also matches
// ErrUnavailable when the backend could not decide, and only then, so
// that one test tells the two apart:
//
//	switch {
//	case errors.Is(err, dsync.ErrUnavailable): // the backend could not decide: alert, retry later
//	case errors.Is(err, dsync.ErrNotAcquired): // held by another owner (or given up while it was)
//	}
//
// An acquisition that ends on its context or its retry policy matches
// what its last completed attempt met: ErrUnavailable too, or not. An
// attempt cut short by the context, with none completed before it,
// counts as unavailable: the backend did not answer in time.
var (
	// ErrNotAcquired: a lock, permit or leadership was not obtained: taken
	// by another owner, or the backend could not decide (the error then
	// matches ErrUnavailable too), or the caller's context ended first, or
	// the retry policy gave up.
	ErrNotAcquired = backends.ErrNotAcquired
	// ErrNotHeld: Release or Extend on a hold this owner no longer has (it
	// expired, was released already, or never was ours). A double Release
	// returns it.
	ErrNotHeld = backends.ErrNotHeld
	// ErrLeaseLost: the lease ended without Release: a refresh found the
	// hold gone, the local validity ran out, or auto-extension stopped at
	// its bound. Lease.Err returns it once Done is closed.
	ErrLeaseLost = leased.ErrLeaseLost
	// ErrReleased: Lease.Err after a successful Release.
	ErrReleased = errors.New("dsync: lease released")
	// ErrExtendLimit: Extend refused because the lease reached its bound on
	// extensions (count or total hold time). The lease stays valid until its
	// current validity runs out.
	ErrExtendLimit = errors.New("dsync: extension limit reached")
	// ErrNoLeader: an election has no leader at the moment.
	ErrNoLeader = errors.New("dsync: no leader")
	// ErrDuplicateID: a candidate ID campaigns twice at once in an
	// election (in one process, or held by another live process). The
	// Campaign error matches ErrNotAcquired too.
	ErrDuplicateID = errors.New("dsync: duplicate candidate ID")
	// ErrUnsupported: the backend cannot do what was asked.
	ErrUnsupported = backends.ErrUnsupported
	// ErrClosed: the backend was closed.
	ErrClosed = backends.ErrClosed
	// ErrInvalid: bad input (empty key, TTL <= 0, malformed URL, unknown
	// option...), reported before any network I/O. The error is an
	// *InvalidError naming the problem.
	ErrInvalid = backends.ErrInvalid
	// ErrUnknownScheme: Open was given a URL whose scheme no imported
	// backend registered.
	ErrUnknownScheme = errors.New("dsync: unknown URL scheme")
	// ErrUnavailable: the backend could not decide: a request got no
	// answer, or one that says nothing about the hold (a timeout, a broken
	// connection, a server stopped or failing over, no quorum of Redlock
	// nodes, masters in their restart quarantine), so its outcome is
	// unknown. A failed acquisition that matches it matches ErrNotAcquired
	// too, and was not refused because the name is held: whether it is
	// held is unknown. After an Extend that fails so, the lease stays valid
	// until its current validity runs out; after a read of the holder or
	// the leader, nothing is known of it.
	ErrUnavailable = backends.ErrUnavailable
)

// InvalidError names a bad argument, option or URL. It matches ErrInvalid.
type InvalidError = backends.InvalidError
