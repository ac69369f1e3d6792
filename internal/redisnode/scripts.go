package redisnode

import (
	_ "embed"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// Each script is one Lua file after the helpers it calls (fence.lua,
// hold.lua, line.lua, sem_common.lua), and only those: every run defines
// its helpers anew, so a helper a script never calls costs it time. Run
// with EVALSHA, falling back to EVAL when the server's script cache was
// emptied.
var (
	//go:embed fence.lua
	fenceSrc string
	//go:embed hold.lua
	holdSrc string
	//go:embed line.lua
	lineSrc string
	//go:embed sem_common.lua
	semCommonSrc string

	//go:embed acquire.lua
	acquireSrc string
	//go:embed sem_acquire.lua
	semAcquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed limit.lua
	limitSrc string
	//go:embed holder.lua
	holderSrc string
	//go:embed holds.lua
	holdsSrc string
	//go:embed raise_fence.lua
	raiseFenceSrc string
	//go:embed leave.lua
	leaveSrc string

	// lineLib is line.lua after its constant, the hand-over window.
	lineLib = fmt.Sprintf("local hand_over_ms = %d\n", backends.HandOver.Milliseconds()) + lineSrc

	// acquireScript makes an attempt that leaves the line alone (no waiter,
	// ARGV[6] absent): acquire.lua calls line.lua's helpers only for a
	// waiter, so it runs without them. lineAcquireScript makes a waiter's
	// attempt.
	acquireScript     = goredis.NewScript(fenceSrc + holdSrc + acquireSrc)
	lineAcquireScript = goredis.NewScript(fenceSrc + holdSrc + lineLib + acquireSrc)
	semAcquireScript  = goredis.NewScript(fenceSrc + semCommonSrc + semAcquireSrc)
	releaseScript     = goredis.NewScript(semCommonSrc + holdSrc + lineLib + releaseSrc)
	refreshScript     = goredis.NewScript(semCommonSrc + holdSrc + refreshSrc)
	limitScript       = goredis.NewScript(holdSrc + limitSrc)
	holderScript      = goredis.NewScript(semCommonSrc + holderSrc)
	holdsScript       = goredis.NewScript(holdsSrc)
	raiseFenceScript  = goredis.NewScript(holdSrc + raiseFenceSrc)
	leaveScript       = goredis.NewScript(holdSrc + lineLib + leaveSrc)
)
