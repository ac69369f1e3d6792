// Package leader implements dsync.LeaderElection over any backend:
// candidates of one election contend for a lease on the election's name;
// the winner leads while the lease is renewed in the background, and its
// candidate ID, stored as the hold's value, tells observers who leads.
//
// Campaign blocks until the candidate leads and returns a Leadership whose
// Term is the lease's fencing token (it grows with every term on backends
// with fencing). Done is closed when the term ends: by Resign, which
// releases the hold at once so that another candidate takes over, or by
// loss (a renewal found the hold gone, or the local validity ran out while
// renewals failed). Leader reads the current leader; Observe reads it
// every ObserveInterval and on release notices, and streams each leader a
// read finds (a term shorter than the interval may go unseen), from a
// goroutine that stops when its context ends. NewObserver reads and
// observes without a candidate ID.
//
// Run campaigns, runs a function with a context cancelled the moment
// leadership is lost, resigns when it returns, and campaigns again until
// its context ends:
//
//	e, err := leader.New(b, "scheduler", hostname, nil)
//	...
//	err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
//		return schedule(ctx, term) // ctx ends when leadership does
//	}, nil)
//
// At most one candidate holds the lease at a time, with the strength of the
// backend's lock (see the README's guarantees table). A process paused past
// its TTL learns of its loss only when it resumes: pass Term to the
// resources a leader writes to. After a leader dies without resigning, the
// others take over once its hold expires: within the TTL since its last
// renewal, plus up to RetryPeriod. A term never resigned is left to expire
// on the backend.
package leader
