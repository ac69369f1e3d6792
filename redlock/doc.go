// Package redlock is the Redlock backend: locks held on a quorum of N
// independent Redis masters, as the Redlock specification describes, and
// semaphores of up to MaxLimit slots built from such locks.
//
// What it promises: while a majority of the masters keep their data, or
// lose it only in restarts after which they sit out MaxTTL (the restart
// quarantine, which the backend enforces by run_id, and skips for masters
// seen to persist every write), at most one client
// holds a lock, a semaphore admits at most its size, and fencing tokens
// grow with every hold of a key. Validity is the TTL less the time the
// attempt took and a drift allowance, measured by the layer above.
//
// What blocks: an attempt sends one request to every master in parallel,
// each bounded by the per-node timeout, and is decided as soon as N/2+1
// granted it or that became impossible; fencing may add one write-back
// round. A semaphore attempt makes a round per slot until one is won.
// Release and Refresh are one parallel round; every call returns when its
// context ends, and the requests still out finish in the background within
// the per-node timeout. Nothing is logged unless a logger is set (the
// Telemetry.Logger of Options, or of dsync.OpenWith's options).
//
// Waiters of a lock are served in order of their Acquire calls, across
// processes, with bounded barging (docs/redlock.md, "Waiters in order").
//
// What is left behind: a failed lock attempt is withdrawn from every node
// (a semaphore's slot from every node that may hold it), and a hold whose
// reply lands after the attempt was decided is withdrawn when it arrives;
// holds on a node cut off expire after their TTL. Fence counters stay on
// the nodes. Close awaits every goroutine.
//
// The algorithm, the key layout and the safety arguments are in
// docs/redlock.md.
package redlock
