// Package redlock is the Redlock backend: locks held on a quorum of N
// independent Redis masters, as the Redlock specification describes, with
// the specification's "go further" points done by the client, and
// semaphores built from such locks.
//
// One acquisition attempt sends SET NX PX, with the same key and random
// token, to all N masters in parallel. It is decided as soon as N/2+1 nodes
// granted it, or as soon as that became impossible; a node that has not
// answered within the per-node timeout counts as a refusal. The lease's
// validity is the TTL minus the time elapsed since before the first request
// minus the drift allowance, computed by the locker; an attempt left with no
// validity fails. A failed attempt is released on all nodes at once,
// including those that seemed to refuse or time out, and a node whose SET
// is applied late (a paused server, a slow link) is released again when its
// reply finally arrives, as long as it arrives within the TTL; a server
// paused longer than that applies the SET on resume and the key holds that
// one node for one TTL more (an availability cost, never a second holder).
// Undoing a failed attempt sends no release notice, so waiters are not
// woken for a hold that never was. Release and extension use the same
// parallel fan-out and quorum rule; extension never re-creates an expired
// key and is bounded by the locker's MaxExtensions and MaxHold. A release
// that follows its acquisition closely waits, node by node and within the
// per-node timeout, for the acquisition's reply from that node before it
// sends the release there, so each node gets one command per step. A
// fan-out returns when its caller's context ends; the requests not
// answered by then count as failed and finish in the background, within
// the per-node timeout.
//
// The requests run on goroutines of the driver's that outlive a request
// (they exit after a few seconds idle, or at Close), and their deadlines
// are shared among the requests made at about the same time: see
// BenchmarkLockCycleRatio for what that saves.
//
// # Restart quarantine
//
// A master restarted without persistence forgets the locks it held, so its
// vote could grant a held lock twice. The driver learns every node's run_id
// and uptime on each new connection (a connection cannot outlive the server
// process it reached, so every command is attributed to the right process),
// and a node whose process is younger than MaxTTL does not count toward any
// quorum until MaxTTL has passed since it started (uptime is reported in
// whole seconds, so up to a second more): by then every lock it
// held before the restart has expired anyway. This is the specification's
// "delayed restart", done by the client. It assumes that no client uses a
// TTL above MaxTTL (the driver rejects such TTLs) and that Redis expires
// keys by its wall clock, which must not jump forward by more than the
// drift allowance. The price is availability: freshly started nodes do not
// vote for MaxTTL.
//
// # Fencing tokens
//
// The acquire script increments the key's counter on every node that grants
// the hold (one counter per Redis Cluster hash slot, shared by the keys of
// the slot: see redis.FenceKey); a missing counter (new, or lost with the
// node's data) starts at the server's clock in microseconds, rounded down
// to a multiple of MaxTTL/8. The counter is the largest one among the granting nodes. When
// fewer than a majority of them drew that very counter, a second round
// writes it back to every reachable node, and the lease is returned only
// once a majority acknowledged. The token is that counter times MaxLimit
// plus the slot (0 for a lock; see Semaphores).
// Any later acquisition's quorum therefore includes a node whose counter is
// at least that token, and draws a larger one.
//
// The second round is the exception: nodes that saw the same holds keep
// equal counters, and nodes that start a counter in the same round start it
// equal, thanks to the rounding, unless the round straddles a multiple of
// MaxTTL/8 or their clocks differ by more than that. Holds of two keys of
// one slot that reach the nodes in different orders also part them.
//
// What this guarantees: the token of a lease is greater than the token of
// every lease of the same key that was granted (and written back, when it
// had to be) before this lease's acquisition attempt started, as long as a
// majority of the nodes keep acknowledged writes, or lose them only in
// restarts after which their clocks, less MaxTTL/8, read later than the
// time the lost tokens were drawn (the restart quarantine gives them MaxTTL
// for that). A client paused past its TTL therefore holds a token lower
// than its successor's, and a resource that rejects stale tokens rejects
// its writes. The write-back, when needed, costs one more parallel round
// trip; locker.Options NoFencing skips fencing altogether (token 0).
//
// # Semaphores
//
// A semaphore of size N (Request.Limit N, up to MaxLimit = 64) is N
// independent Redlock locks, its slots. An attempt makes one full round on
// each slot in turn, from a random one: the parallel fan-out, the decision
// at quorum, the withdrawal of a failed round from the nodes that may hold
// it (a node that refused holds nothing, so a refused slot costs one round
// trip), and stops at the first slot won. The permit is that slot's lock:
// Grant.Key names it (the semaphore's key, a NUL byte and the slot's
// index), and the layer above refreshes and releases it there. Keys that
// contain a NUL byte are refused, so that a slot's key never names a lock.
// A semaphore of size 1 is the lock of the same key.
//
// Two holders of one slot would need two majorities to grant the same key
// at once, which the lock's argument rules out, so the semaphore never
// admits more than N holders (within the lock's own assumptions: bounded
// clock drift, restart quarantine). A majority vote over per-node sets of
// holders would not: with 5 nodes and size 2, clients A, B and C admitted
// by nodes {0,1,2}, {2,3,4} and {0,1,3} each hold a majority while no node
// admits more than 2.
//
// The cost is in rounds: a permit on a semaphore with k of N slots taken
// costs (N+1)/(N-k+1) rounds on average when the taken slots are spread at
// random (slots are tried in order from a random start), and a refusal on
// a full semaphore costs N rounds, each one parallel round trip to the
// quorum. That is why MaxLimit is modest; for
// larger pools, a semaphore per shard of the work does better. An attempt
// stops early when fewer than a quorum of nodes answer (ErrNoQuorum), when
// its context ends, or when no time would be left in the TTL for another
// round.
//
// Fencing tokens grow over all the permits of a semaphore, and over the
// lock of its key: every slot draws from, and when needed writes back to,
// the key's one counter per node, by the same rule as a lock. Permits won at the
// same time on different slots may draw the same counter (each is the
// largest among its own majority); the slot number in the token's low bits
// keeps their tokens distinct, and a permit granted after another one was
// granted still has the larger token.
//
// A key has one size at a time. While any slot is held, each node keeps
// the semaphore's size in the key of its lock, which lives as long as the
// slots; an attempt of another size, or on the lock of the key, fails with
// the error of backends.LimitMismatch when a quorum of nodes report the
// other size (a minority, say a node that missed a release, is outvoted),
// and a semaphore attempt while the lock is held fails likewise. The
// release of a slot publishes on the key's channel, so that waiters of the
// semaphore wake as they do for a lock. Holder reports, of the holders
// that a quorum of nodes agree on, the one whose permit expires last.
//
// # Configuration
//
// N >= 1 nodes, quorum N/2+1 (an even N tolerates no more failures than N-1
// and is warned about); the same server listed twice, under any name, is
// rejected by comparing run_ids; TTLs above MaxTTL or too small for the
// per-node timeout are rejected before any I/O.
package redlock
