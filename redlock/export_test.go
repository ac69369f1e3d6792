package redlock

import "sync"

// votersByHold keeps the voters of every hold won in the test binary, by
// key and token (tokens are unique).
var votersByHold sync.Map

func init() {
	onGrant = func(key, token string, voters []int) { votersByHold.Store(wonKey{key, token}, voters) }
}

// Voters lists, by index, the nodes that granted the hold of key by
// token; nil when none was won.
func Voters(key, token string) []int {
	v, _ := votersByHold.Load(wonKey{key, token})
	voters, _ := v.([]int)
	return voters
}

// SlotOf reports the slot of the semaphore key that d granted to token,
// and whether d knows of one.
func SlotOf(d *Driver, key, token string) (int, bool) {
	t := d.won.find(key, token)
	return t.Slot, t.Slots > 0
}

// WithoutWorkers makes d run every node request on a fresh goroutine, for
// BenchmarkWorkers. Call it before d's first request.
func WithoutWorkers(d *Driver) { d.noWorkers = true }

// ParseServerInfo is parseServerInfo, for its table test.
var ParseServerInfo = parseServerInfo
