package redis

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// The node operations below serve the redlock package, which composes N
// drivers, one per independent master; applications use Acquire.

var (
	//go:embed acquire_seeded.lua
	acquireSeededSrc string
	//go:embed raise_fence.lua
	raiseFenceSrc string

	acquireSeededScript = goredis.NewScript(fenceSrc + acquireSeededSrc)
	raiseFenceScript    = goredis.NewScript(raiseFenceSrc)
)

// AcquireSeeded is Acquire for a Redlock node, locks only: a missing fence
// counter starts at the server's clock in microseconds rounded down to a
// multiple of seedStep (a seedStep below a microsecond counts as one). The
// counter is per node; Redlock combines them (see RaiseFence). Rounding
// lets nodes that seed a counter at nearly the same time draw equal
// counters, which then need no write-back.
func (d *Driver) AcquireSeeded(ctx context.Context, req backends.Request, seedStep time.Duration) (backends.Grant, error) {
	return d.acquire(ctx, req, acquireSeededScript, seedStep)
}

// seedStepArg is a seed step as the scripts take it: whole microseconds,
// at least one.
func seedStepArg(step time.Duration) int64 {
	return max(step.Microseconds(), 1)
}

// RaiseFence raises key's fence counter to at least token: the write-back
// round that makes a Redlock token visible to every later quorum.
func (d *Driver) RaiseFence(ctx context.Context, key string, token uint64) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	hold, err := d.holdKey(key)
	if err != nil {
		return err
	}
	if err := raiseFenceScript.Run(ctx, d.client, []string{fenceKey(d.prefix, hold)}, strconv.FormatUint(token, 10)).Err(); err != nil {
		return d.wrap(err)
	}
	return nil
}

// Withdraw is Release without the release notice, for undoing a failed
// Redlock attempt: waiters were not waiting for a hold that never was, and
// a notice would wake them (and the attempt's own waiter) for nothing.
func (d *Driver) Withdraw(ctx context.Context, key, token string) error {
	return d.release(ctx, key, token, silent)
}

// Client returns the go-redis client the driver uses.
func (d *Driver) Client() goredis.UniversalClient { return d.client }
