package redlock

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrAlias: the node is another address of a server that a node listed
// before it reached first (the same run_id), so it is left out of every
// quorum: one server, one vote. New refuses such a pair when both answer
// it; a node that answers only later is found out at its first
// connection.
var ErrAlias = errors.New("dsync: redlock: another address of a listed master, left out of every quorum")

// identities records which node first reached each server process (by
// run_id), across the nodes of one driver.
type identities struct {
	logger *slog.Logger // the Telemetry.Logger of Options: told of each alias once; may be nil

	mu      sync.Mutex       // protects the maps
	owner   map[string]*node // run_id -> the node that first reached it
	current map[*node]string // node -> the run_id of its latest connection
	told    map[*node]*node  // alias -> owner, as last logged
}

func newIdentities(logger *slog.Logger) *identities {
	return &identities{logger: logger, owner: map[string]*node{}, current: map[*node]string{}, told: map[*node]*node{}}
}

// connected records that n has connected to the process runID. It returns
// an error matching ErrAlias, naming both addresses, when another node
// reached that process first and is still connected to it; nil when n is
// the process's own node.
func (ids *identities) connected(n *node, runID string) error {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if prev, ok := ids.current[n]; ok && prev != runID && ids.owner[prev] == n {
		delete(ids.owner, prev) // n has moved on (a restart, a failover)
	}
	ids.current[n] = runID
	o := ids.owner[runID]
	if o == nil || o == n || ids.current[o] != runID {
		ids.owner[runID] = n
		delete(ids.told, n)
		return nil
	}
	if ids.told[n] != o {
		ids.told[n] = o
		if ids.logger != nil {
			ids.logger.Warn("dsync: redlock: two addresses of one server; the later is left out of every quorum",
				"node", n.index, "addr", n.addr, "same_as_node", o.index, "same_as_addr", o.addr, "run_id", runID)
		}
	}
	return fmt.Errorf("%w: %s is the server of node %d (%s), run_id %s", ErrAlias, n.addr, o.index, o.addr, runID)
}
