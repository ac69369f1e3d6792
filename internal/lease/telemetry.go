package lease

import (
	"errors"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// The primitives a Config can serve, as its telemetry names them.
const (
	Lock      = telemetry.Lock
	Semaphore = telemetry.Semaphore
	Election  = telemetry.Election
)

// SetKind sets the primitive c's leases serve, for telemetry: New assumes
// a lock, or a semaphore above a limit of 1. An election's candidate ID is
// c.Value. Call it right after New, before any lease is acquired.
func (c *Config) SetKind(k telemetry.Kind) {
	candidate := ""
	if k == Election {
		candidate = string(c.Value)
	}
	c.tel = telemetry.Of(c.Backend).Prim(k, c.Key, candidate)
}

// Telemetry returns the telemetry of c's primitive, for the hooks the
// leader package adds (failover, observed changes).
func (c *Config) Telemetry() *telemetry.Prim { return c.tel }

// fenceOrZero is the lease's fencing token, or 0 for no lease.
func (l *Lease) fenceOrZero() uint64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// extendOutcome classifies an Extend's result.
func extendOutcome(err error) telemetry.ExtendOutcome {
	switch {
	case err == nil:
		return telemetry.Extended
	case errors.Is(err, dsync.ErrExtendLimit):
		return telemetry.ExtendLimit
	case errors.Is(err, dsync.ErrLeaseLost), errors.Is(err, dsync.ErrNotHeld):
		return telemetry.ExtendNotHeld
	}
	return telemetry.ExtendFailed
}

// kindOf is the primitive New assumes for a limit.
func kindOf(limit int) telemetry.Kind {
	if limit > 1 {
		return Semaphore
	}
	return Lock
}
