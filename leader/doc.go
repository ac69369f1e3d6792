// Package leader implements dsync.LeaderElection once, over any backend's
// driver: candidates of one election contend for a lease on the election's
// name, the winner leads for as long as the lease is auto-extended, and its
// candidate ID, stored as the hold's value, tells observers who leads.
//
// A candidate campaigns with Campaign, which blocks until it leads, and gets
// a Leadership: its Term is the lease's fencing token, so it grows with
// every new term (on backends with fencing); Done is closed when the term
// ends, by Resign or by loss (a renewal found the hold gone, or the lease's
// validity ran out while renewals failed). Resign releases the hold at once,
// and the backend's release notice wakes the other candidates, so that one
// takes over without waiting for the term to expire. Leader reads the
// current leader's ID; Observe streams its changes.
//
// Most programs want Run, which campaigns, runs a function with a context
// cancelled the moment leadership is lost, resigns when it returns, and
// campaigns again until its context ends:
//
//	e, err := leader.New(b, "scheduler", hostname, nil)
//	...
//	err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
//		return schedule(ctx, term) // ctx ends when leadership does
//	}, nil)
//
// # Guarantees
//
// At most one candidate holds the election's lease at a time, with the
// strength of the backend's lock (see the README's guarantees table). A
// leader whose renewals stop succeeding (cut off from the server) sees its
// term end, from its lease's local validity, before any other candidate can
// be granted the lease, as long as clocks run at about the same rate (the
// drift allowance). A process paused longer than its TTL cannot see
// anything until it resumes: pass Term to the resources a leader writes to,
// so that they can reject a stale leader's writes.
//
// Failover after a resignation takes a round trip or two on backends that
// send release notices (all of dsync's). After a leader dies without
// resigning, the others take over once its hold expires on the server:
// within the TTL since its last renewal, plus up to RetryPeriod (±20%) on
// backends whose notices do not report expiry (Redis, Redlock, memory);
// etcd's watch reports the expiry, but etcd itself revokes expired leases
// with a delay of its own.
package leader
