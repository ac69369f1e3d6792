package redlock

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

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

// Driver is the driver type, for the tests that drive the SPI directly.
type Driver = driver

// NewDriver returns New's driver, for the tests that drive the SPI
// directly.
func NewDriver(ctx context.Context, nodes []*goredis.Options, opts *Options) (*Driver, error) {
	d, _, err := newDriver(ctx, nodes, opts, newWorkers())
	return d, err
}

// NewDriverFromClients returns NewFromClients' driver, for the tests that
// drive the SPI directly.
func NewDriverFromClients(ctx context.Context, clients []goredis.UniversalClient, opts *Options) (*Driver, error) {
	nodes, err := clientOptions(clients)
	if err != nil {
		return nil, err
	}
	return NewDriver(ctx, nodes, opts)
}

// NewWithoutWorkers is NewDriver with a driver that runs every node
// request on a fresh goroutine, the reference of BenchmarkWorkers.
func NewWithoutWorkers(ctx context.Context, nodes []*goredis.Options, opts *Options) (*Driver, error) {
	d, _, err := newDriver(ctx, nodes, opts, &goroutines{})
	return d, err
}

// goroutines is the spawner without workers: a fresh goroutine for every f.
type goroutines struct {
	mu       sync.Mutex // orders every wg.Go before Stop's wg.Wait or after none
	stopping bool       // protected by mu
	wg       sync.WaitGroup
}

func (g *goroutines) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return false
	}
	g.wg.Go(f)
	return true
}

func (g *goroutines) Stop() {
	g.mu.Lock()
	g.stopping = true
	g.mu.Unlock()
	g.wg.Wait()
}

// ParseServerInfo is parseServerInfo, for its table test.
var ParseServerInfo = parseServerInfo

// RunIDOf is the run_id of the server process node i last connected to.
func RunIDOf(d *Driver, i int) string { return d.nodes[i].currentRunID() }

// ReadPersistence is readPersistence, for its table test: whether the
// replies show a server that persists every write, and why not.
func ReadPersistence(info *goredis.StringCmd, fsync, noRewrite *goredis.MapStringStringCmd) (bool, string) {
	p := readPersistence(info, fsync, noRewrite)
	return p.durable, p.what
}
