// Package memory is an in-process dsync backend: holds live in a map guarded
// by a mutex, and time comes from a Clock you can set. It is meant for fast,
// deterministic tests, examples and development.
//
// It is NOT distributed. Its guarantees hold between goroutines of one
// process that share a Store, and nowhere else: two processes that each open
// memory://demo get two unrelated stores and may both "hold" the same key.
//
// A Store is the state a server would keep: the holds of every key, a fence
// counter per key and the release watchers. Several backends may share one
// Store, which models several clients of one server; closing a backend
// never affects the Store or the holds in it.
//
// Open a backend with New, or by URL once this package is imported:
//
//	memory://name
//
// opens a backend on the process-wide store registered under name, created on
// first use and shared by every later Open of the same name (see Named). The
// scheme takes only dsync's common query options.
//
// Expiry is lazy: a hold whose time to live has passed is dropped, and the
// key's release watchers woken, when the key is next accessed. Under a
// ManualClock, Set and Advance also sweep every store built on the clock, so
// that a waiter on a release hint wakes as soon as the clock passes its key's
// expiry. Under the real clock nothing runs in the background: an expired hold
// that nobody touches wakes nobody, which is allowed of a hint.
package memory
