// Package hook gives the packages of this module built over the driver
// SPI (internal/lease, locker, semaphore, leader, backendtest, the tools)
// what a *dsync.Backend keeps for them, with no exported method on the
// Backend: package dsync sets these functions in its init, as the standard
// library does with its internal hooks. This package sits below dsync and
// cannot name *dsync.Backend, so the functions take it as any, and panic
// on any other value; internal/lease offers them typed.
package hook

import (
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

var (
	// Driver returns the driver of a *dsync.Backend.
	Driver func(b any) backends.Driver
	// Telemetry returns the telemetry of a *dsync.Backend.
	Telemetry func(b any) *telemetry.T
	// State returns the value kept on a *dsync.Backend under key, made by
	// create on the first call with that key. Packages keep their
	// per-backend state there (a leader's live candidacies, the local
	// waiting lines) under a key of a package-private type, so that two
	// backends never share it and nothing outlives the backend: a value
	// with a Close() method is closed when the backend is, after its
	// driver. It is safe for concurrent use; create runs under the
	// backend's lock and must not call State.
	State func(b any, key any, create func() any) any
)
