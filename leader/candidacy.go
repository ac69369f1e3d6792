package leader

import (
	"fmt"
	"sync"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
)

// The live candidacies of one *dsync.Backend, kept on it
// (lease.State), so that two live Campaigns of one candidate ID in
// one election on one backend are refused, and candidates of unrelated
// backends never meet.
type candidacies struct {
	mu sync.Mutex
	m  map[candidacyKey]*candidacy // protected by mu
}

// candidaciesKey is the key of a backend's candidacies in its state.
type candidaciesKey struct{}

type candidacyKey struct {
	name, id string
}

// candidacy is one live Campaign and the leadership it won.
type candidacy struct {
	all *candidacies
	key candidacyKey
	l   *Leadership // set once the campaign is won; protected by all.mu
}

// register records a live Campaign of e, or fails if one is live already.
// A candidacy whose leadership was lost without Resign is over.
func (e *Election) register() (*candidacy, error) {
	b := e.cfg.Backend
	all := lease.State(b, candidaciesKey{}, func() *candidacies { return &candidacies{m: map[candidacyKey]*candidacy{}} })
	k := candidacyKey{e.name, e.id}
	all.mu.Lock()
	defer all.mu.Unlock()
	if c := all.m[k]; c != nil {
		over := false
		if c.l != nil {
			select {
			case <-c.l.Done():
				over = true
			default:
			}
		}
		if !over {
			return nil, fmt.Errorf("%w: %w: %q already campaigns or leads in election %q on %s in this process",
				dsync.ErrNotAcquired, ErrDuplicateID, e.id, e.name, b)
		}
	}
	c := &candidacy{all: all, key: k}
	all.m[k] = c
	return c, nil
}

func (c *candidacy) lead(l *Leadership) {
	c.all.mu.Lock()
	defer c.all.mu.Unlock()
	c.l = l
}

// unregister ends the candidacy, unless a later one replaced it.
func (c *candidacy) unregister() {
	c.all.mu.Lock()
	defer c.all.mu.Unlock()
	if c.all.m[c.key] == c {
		delete(c.all.m, c.key)
	}
}
