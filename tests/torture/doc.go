// Package torture measures the safety of dsync's primitives under faults:
// worker processes (see internal/testenv/proc) loop acquire, critical section,
// release on a lock, a semaphore or an election, writing to a fenced store
// in their critical sections and reporting every step on CLOCK_MONOTONIC;
// a nemesis kills, pauses, restarts and cuts off servers and workers on
// the same clock; checkers then look for what must never happen (two
// holders at once, a token granted out of order, a stale write accepted,
// an acknowledged write lost) and measure what must stay bounded (the time
// to the next grant after a holder dies).
//
// The fenced store (Store) is a redis-server, an etcd, a PostgreSQL
// database or a SQLite file of its own, written through a guard of package
// fence (fence.Redis, fence/etcdfence, fence.SQL), which accepts a write
// to a resource only if its fencing token is at least the largest it
// accepted for that resource; the store keeps every accepted write in
// order: the stand-in for the database a lock protects.
//
// The same harness runs the package's scenarios under go test and the soak
// of dsync check. Every check can fail: the scenarios' negative controls
// (fencing off, writes without the guard, restart quarantine off, a naive
// majority semaphore) must
// make it report the violation it exists to find.
package torture
