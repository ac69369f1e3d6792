package lease

import (
	"errors"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// Kind is the primitive a Config serves, as its telemetry names it.
type Kind = telemetry.Kind

// The primitives a Config can serve.
const (
	Lock      = telemetry.Lock
	Semaphore = telemetry.Semaphore
	Election  = telemetry.Election
)

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
