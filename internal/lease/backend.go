package lease

import (
	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/hook"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// Driver returns b's driver, for the packages and tools of this module
// that work below the lease layer (the conformance suite, the torture
// suite). b must not be nil.
func Driver(b *dsync.Backend) backends.Driver { return hook.Driver(b) }

// State returns the value kept on b under key, made by create on the
// first call with that key (see hook.State): a package's per-backend
// state, under a key of a package-private type.
func State[V any](b *dsync.Backend, key any, create func() V) V {
	return hook.State(b, key, func() any { return create() }).(V)
}

// telemetryOf returns b's telemetry.
func telemetryOf(b *dsync.Backend) *telemetry.T { return hook.Telemetry(b) }
