package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// Slot operations serve the redlock package, whose semaphore of limit N is
// N independent Redlock locks, its slots: each method below is one node's
// part of one Redlock operation on one slot. A majority vote over one
// per-node set of holders would not be safe above limit 1 (with 5 nodes and
// limit 2, three clients can each be admitted by 3 nodes while no node
// admits more than 2), so each slot is voted on separately.
//
// With the key prefix P and a semaphore key K of limit N, a node holds:
//
//	P{K}:slot:I    string  slot I's hold (0 <= I < N): the token, or token
//	                       + "\n" + value; expires after the TTL
//	P{K}           string  while any slot is held, the marker "\n" + N,
//	                       living at least as long as every slot: it records
//	                       the limit, and it is the key of K's lock, so a
//	                       lock of K cannot be taken beside the slots (a
//	                       lock's hold never starts with "\n": tokens are
//	                       not empty)
//	P fence:{T}    string  the fence counter of K's slot (see FenceKey),
//	                       shared with the lock of K, so that tokens grow
//	                       over every hold of K
//	P{K}:released  channel the release notices of the slots and of the lock
//
// All of them are in K's hash slot.

// MaxSlots is the largest limit the slot operations accept: releasing a
// slot and reading the holders visit every slot of the semaphore.
const MaxSlots = 1024

var (
	//go:embed slot_acquire.lua
	slotAcquireSrc string
	//go:embed slot_refresh.lua
	slotRefreshSrc string
	//go:embed slot_release.lua
	slotReleaseSrc string
	//go:embed slot_holders.lua
	slotHoldersSrc string
	//go:embed slot_unlock.lua
	slotUnlockSrc string

	slotAcquireScript = goredis.NewScript(fenceSrc + slotAcquireSrc)
	slotRefreshScript = goredis.NewScript(slotRefreshSrc)
	slotReleaseScript = goredis.NewScript(slotReleaseSrc)
	slotHoldersScript = goredis.NewScript(slotHoldersSrc)
	slotUnlockScript  = goredis.NewScript(slotUnlockSrc)
)

// The slot scripts' flags, boxed once.
var slotYes, slotNo any = "1", "0"

// slotCaps checks slot requests: the driver's own Capabilities describe its
// locks.
var slotCaps = backends.Capabilities{
	Name:          "redis",
	MaxLimit:      MaxSlots,
	Fencing:       true,
	TTLResolution: time.Millisecond,
}

// LimitError is a node's refusal of a slot, or of a lock, because the key's
// live holds there have another limit. It is one node's view: it does not
// match backends.ErrInvalid, since Redlock decides a mismatch only when a
// majority of the nodes report one.
type LimitError struct {
	Key string
	// Limit is the limit asked for (1 for a lock).
	Limit int
	// Holders is the limit of the key's live holds (1 for a lock).
	Holders int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("redis: %q is held with limit %d, not %d", e.Key, e.Holders, e.Limit)
}

// slotKeys returns the Redis keys of slot of key: the slot's hold and the
// semaphore's marker.
func (d *Driver) slotKeys(key string, slot int) (hold, marker string, err error) {
	if d.closed.Load() {
		return "", "", backends.ErrClosed
	}
	marker, err = d.holdKey(key)
	if err != nil {
		return "", "", err
	}
	if slot < 0 || slot >= MaxSlots {
		return "", "", backends.Invalid("slot", "%d is outside 0..%d", slot, MaxSlots-1)
	}
	return marker + ":slot:" + strconv.Itoa(slot), marker, nil
}

// AcquireSlot makes one node's attempt to hold slot of the semaphore
// req.Key of limit req.Limit (at least 2; slot below it): SET NX PX of the
// slot, and when req.Fence an increment of the key's fence counter, seeded
// from the server's clock rounded down to seedStep when missing (see
// AcquireSeeded). It returns ErrNotAcquired when the slot is held, and a
// *LimitError when the key is held with another limit on this node (by its
// lock: limit 1). Grant.TTL is req.TTL truncated to whole milliseconds. Any other error leaves the
// outcome unknown: release the slot with WithdrawSlot.
func (d *Driver) AcquireSlot(ctx context.Context, req backends.Request, slot int, seedStep time.Duration) (backends.Grant, error) {
	if err := backends.CheckRequest(req, slotCaps); err != nil {
		return backends.Grant{}, err
	}
	if req.Limit < 2 {
		return backends.Grant{}, backends.Invalid("limit", "%d: a slot belongs to a semaphore of limit 2 or more", req.Limit)
	}
	if slot >= req.Limit {
		return backends.Grant{}, backends.Invalid("slot", "%d is outside 0..%d", slot, req.Limit-1)
	}
	if err := checkToken(req.Token); err != nil {
		return backends.Grant{}, err
	}
	hold, marker, err := d.slotKeys(req.Key, slot)
	if err != nil {
		return backends.Grant{}, err
	}
	val := req.Token
	if len(req.Value) > 0 {
		val = req.Token + "\n" + string(req.Value)
	}
	ttl := req.TTL.Truncate(time.Millisecond)
	fence := slotNo
	if req.Fence {
		fence = slotYes
	}
	n, err := slotAcquireScript.Run(ctx, d.client, []string{hold, marker, fenceKey(d.prefix, marker)},
		val, ttl.Milliseconds(), req.Limit, fence, seedStepArg(seedStep)).Int64()
	switch {
	case err != nil:
		return backends.Grant{}, d.wrap(err)
	case n < 0:
		return backends.Grant{}, &LimitError{Key: req.Key, Limit: req.Limit, Holders: int(-n)}
	case n == 0:
		return backends.Grant{}, backends.ErrNotAcquired
	}
	g := backends.Grant{TTL: ttl}
	if req.Fence {
		g.Fence = uint64(n)
	}
	return g, nil
}

// RefreshSlot resets the TTL of token's hold of slot of key, and keeps the
// semaphore's marker alive as long. It never re-creates an expired slot:
// that, or a slot held by another token, is ErrNotHeld.
func (d *Driver) RefreshSlot(ctx context.Context, key string, slot int, token string, ttl time.Duration) error {
	hold, marker, err := d.slotKeys(key, slot)
	if err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	if err := backends.CheckTTL(ttl, slotCaps); err != nil {
		return err
	}
	n, err := slotRefreshScript.Run(ctx, d.client, []string{hold, marker}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return d.wrap(err)
	}
	if n == 0 {
		return backends.ErrNotHeld
	}
	return nil
}

// ReleaseSlot deletes token's hold of slot of key with a compare-and-delete,
// cuts the semaphore's marker to the slots left (deleting it with the last
// one), and publishes a release notice on key's channel, the one
// WatchReleases(key) listens to. A slot that expired or is held by another
// token is left alone and reported as ErrNotHeld.
func (d *Driver) ReleaseSlot(ctx context.Context, key string, slot int, token string) error {
	return d.releaseSlot(ctx, key, slot, token, slotYes)
}

// WithdrawSlot is ReleaseSlot without the release notice, for undoing a
// failed Redlock attempt on a slot.
func (d *Driver) WithdrawSlot(ctx context.Context, key string, slot int, token string) error {
	return d.releaseSlot(ctx, key, slot, token, slotNo)
}

func (d *Driver) releaseSlot(ctx context.Context, key string, slot int, token string, notify any) error {
	hold, marker, err := d.slotKeys(key, slot)
	if err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	n, err := slotReleaseScript.Run(ctx, d.client, []string{hold, marker}, token, notify).Int64()
	if err != nil {
		return d.wrap(err)
	}
	if n == 0 {
		return backends.ErrNotHeld
	}
	return nil
}

// WithdrawLock undoes a failed Redlock attempt on the lock of key, as
// Withdraw does, and tells why the lock was refused when a semaphore holds
// key: it returns nil when token's hold was deleted, a *LimitError (Limit
// 1, Holders the semaphore's limit) when key's slots are held, and
// ErrNotHeld otherwise.
func (d *Driver) WithdrawLock(ctx context.Context, key, token string) error {
	hold, err := d.tokenHold(key, token)
	if err != nil {
		return err
	}
	n, err := slotUnlockScript.Run(ctx, d.client, []string{hold}, token).Int64()
	switch {
	case err != nil:
		return d.wrap(err)
	case n < 0:
		return &LimitError{Key: key, Limit: 1, Holders: int(-n)}
	case n == 0:
		return backends.ErrNotHeld
	}
	return nil
}

// SlotHold is one live hold of a key on one node.
type SlotHold struct {
	// Slot is the slot's index, or -1 for the key's lock.
	Slot int
	// Limit is the key's limit: 1 for a lock.
	Limit int
	// Token and Value are the hold's (Request.Token and Request.Value).
	Token string
	Value []byte
	// TTL is the remaining time to live as the server reports it.
	TTL time.Duration
}

// SlotHolds lists the live holds of key on this node, lock or slots, in
// slot order; none when key is not held.
func (d *Driver) SlotHolds(ctx context.Context, key string) ([]SlotHold, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	marker, err := d.holdKey(key)
	if err != nil {
		return nil, err
	}
	res, err := slotHoldersScript.Run(ctx, d.client, []string{marker}).Slice()
	if err != nil {
		return nil, d.wrap(err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	limit, ok := res[0].(int64)
	if !ok || len(res)%3 != 1 {
		return nil, fmt.Errorf("redis: slot_holders.lua returned %d values starting with %T", len(res), res[0])
	}
	out := make([]SlotHold, 0, len(res)/3)
	for i := 1; i < len(res); i += 3 {
		slot, ok1 := res[i].(int64)
		v, ok2 := res[i+1].(string)
		pttl, ok3 := res[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return nil, errors.New("redis: slot_holders.lua returned a malformed hold")
		}
		h := SlotHold{Slot: int(slot), Limit: int(limit), Token: v}
		if tok, val, found := strings.Cut(v, "\n"); found {
			h.Token = tok
			if val != "" {
				h.Value = []byte(val)
			}
		}
		if pttl > 0 {
			h.TTL = time.Duration(pttl) * time.Millisecond
		}
		out = append(out, h)
	}
	return out, nil
}
