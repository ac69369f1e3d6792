package redisnode

import (
	"context"

	"github.com/dsync-dev/dsync/backends"
)

// Leave takes waiter out of key's line on this node; if the lock was kept
// for waiter, it goes to the next live waiter in line, or is freed, and
// the key's waiters are told.
func (n *Node) Leave(ctx context.Context, key, waiter string) error {
	own, err := n.ownKey(key)
	if err != nil {
		return err
	}
	if waiter == "" {
		return backends.Invalid("waiter", "empty")
	}
	if err := backends.CheckWaiter(waiter); err != nil {
		return err
	}
	return leaveScript.Run(ctx, n.client, []string{own}, waiter).Err()
}
