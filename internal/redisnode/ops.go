package redisnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// Hold is what an attempt asks a node for.
type Hold struct {
	Token string
	Value []byte
	// TTL is applied in whole milliseconds.
	TTL time.Duration
	// Fence asks for the key's fence counter to be drawn.
	Fence bool
	// SeedStep: a missing fence counter starts at the server's clock in
	// microseconds rounded down to a multiple of it (below 1µs: 1µs), so
	// that Redlock nodes seeding it at nearly the same time start it equal.
	SeedStep time.Duration
	// Waiter names the blocking acquisition of a lock that the attempt
	// belongs to (backends.Request.Waiter; checked by the caller), "" for
	// none. Refused, the waiter joins the key's line for TTL; a lock kept
	// for it, it takes. A slot ignores it.
	Waiter string
}

// value is the hold as stored: the token, or token + "\n" + value.
func (h Hold) value() string {
	if len(h.Value) == 0 {
		return h.Token
	}
	return h.Token + "\n" + string(h.Value)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Acquire makes one attempt to hold t, in one round trip. It returns the
// drawn fence counter (0 unless h.Fence), ErrNotAcquired when t is held (or
// a lock is kept for another waiter), or a *LimitError when the key is
// held with another limit. Any other error leaves the outcome unknown:
// Release the target to be sure.
//
// A lock's attempt with a waiter runs acquire.lua with the line's helpers:
// refused, the waiter joins the line; a lock kept for it, it takes; a free
// lock with a live waiter ahead of it goes to that waiter. Any other
// attempt leaves the line alone: without a fence to draw or a marker to
// keep, it is a plain SET NX PX, several times cheaper for Redis than a
// script, and its refusal is looked into (see refusal).
func (n *Node) Acquire(ctx context.Context, t Target, h Hold) (uint64, error) {
	hold, own, err := n.keys(t)
	if err != nil {
		return 0, err
	}
	if err := checkToken(h.Token); err != nil {
		return 0, err
	}
	if hold == own && h.Waiter == "" && !h.Fence {
		err := n.client.SetArgs(ctx, hold, h.value(), goredis.SetArgs{Mode: "NX", TTL: h.TTL.Truncate(time.Millisecond)}).Err()
		if errors.Is(err, goredis.Nil) {
			return 0, n.refusal(ctx, t, own)
		}
		return 0, err
	}
	script, waiter := acquireScript, ""
	if hold == own && h.Waiter != "" {
		script, waiter = lineAcquireScript, h.Waiter
	}
	keys, args := n.acquireArgs(t, h, hold, own, waiter)
	r, err := script.Run(ctx, n.client, keys, args...).Int64()
	return verdict(t.Key, t.limit(), h.Fence, r, err)
}

// acquireArgs returns acquire.lua's keys and arguments, ARGV[6] being
// waiter, left out when "". They are built only for a script: the plain
// SET NX PX needs none of them, and they cost it six allocations.
func (n *Node) acquireArgs(t Target, h Hold, hold, own, waiter string) ([]string, []any) {
	size := 5
	if waiter != "" {
		size = 6
	}
	args := append(make([]any, 0, size), h.value(), h.TTL.Truncate(time.Millisecond).Milliseconds(), t.limit(), flag(h.Fence), max(h.SeedStep.Microseconds(), 1))
	if waiter != "" {
		args = append(args, waiter)
	}
	return []string{hold, own, fenceKey(n.prefix, own)}, args
}

// refusal is the verdict on a lock whose SET NX failed: a *LimitError when
// the key is held with another limit, else ErrNotAcquired (also when the
// question fails: the SET's verdict stands).
func (n *Node) refusal(ctx context.Context, t Target, own string) error {
	held, err := limitScript.Run(ctx, n.client, []string{own}).Int64()
	if err != nil || held == 0 || held == int64(t.limit()) {
		return backends.ErrNotAcquired
	}
	return &LimitError{Key: t.Key, Limit: t.limit(), Holders: int(held)}
}

// verdict decodes an acquire script's answer: -M another limit M, 0 taken,
// else the fence counter when one was drawn.
func verdict(key string, limit int, fence bool, r int64, err error) (uint64, error) {
	switch {
	case err != nil:
		return 0, err
	case r < 0:
		return 0, &LimitError{Key: key, Limit: limit, Holders: int(-r)}
	case r == 0:
		return 0, backends.ErrNotAcquired
	case !fence:
		return 0, nil
	}
	return uint64(r), nil
}

// AcquireSet makes one attempt on the single-server semaphore of key of
// size size (2..MaxSetSize): a sorted set of holders scored by expiry on
// the server's clock, pruned of expired holders first. Its verdicts are
// Acquire's.
func (n *Node) AcquireSet(ctx context.Context, key string, size int, h Hold) (uint64, error) {
	own, err := n.ownKey(key)
	if err != nil {
		return 0, err
	}
	if err := checkToken(h.Token); err != nil {
		return 0, err
	}
	r, err := semAcquireScript.Run(ctx, n.client, []string{own, fenceKey(n.prefix, own), own + ":values"},
		h.Token, h.TTL.Milliseconds(), flag(h.Fence), size, h.Value).Int64()
	return verdict(key, size, h.Fence, r, err)
}

// Refresh resets the TTL of token's hold of t, and never re-creates an
// expired one: that, or a hold of another token, is ErrNotHeld.
func (n *Node) Refresh(ctx context.Context, t Target, token string, ttl time.Duration) error {
	return n.run(ctx, refreshScript, t, token, ttl.Milliseconds())
}

// Release deletes token's hold of t, and only that, publishing a release
// notice on the key's channel when notify is set (an attempt that failed
// is withdrawn without one, unless the lock is handed on: it released
// nothing anybody waited for). A lock is then kept for the first live
// waiter in its line, for backends.HandOver. A hold that expired or belongs to
// another token is ErrNotHeld.
func (n *Node) Release(ctx context.Context, t Target, token string, notify bool) error {
	return n.run(ctx, releaseScript, t, token, flag(notify))
}

// Withdraw is Release, without notify, of attempt h on t after its round
// failed, whose waiter goes back in the lock's line for h.TTL, where it
// was, before the lock is handed on: a Redlock waiter that took the lock
// kept for it on some nodes, but not a quorum, keeps its turn there.
func (n *Node) Withdraw(ctx context.Context, t Target, h Hold) error {
	if t.Slots != 0 {
		h.Waiter = ""
	}
	if h.Waiter == "" {
		return n.run(ctx, releaseScript, t, h.Token, "0")
	}
	return n.run(ctx, releaseScript, t, h.Token, "0", h.Waiter, h.TTL.Milliseconds())
}

// run runs release.lua or refresh.lua on t: 1 done, 0 ErrNotHeld.
func (n *Node) run(ctx context.Context, s *goredis.Script, t Target, token string, args ...any) error {
	hold, own, err := n.keys(t)
	if err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	r, err := s.Run(ctx, n.client, []string{hold, own, own + ":values"}, append([]any{token}, args...)...).Int64()
	if err == nil && r == 0 {
		return backends.ErrNotHeld
	}
	return err
}

// RaiseFence raises t's fence counter to at least fence, Redlock's
// write-back, which makes a token visible to every later quorum; and
// records fence in the node's hold of t by holdToken, if it has it, so
// that the nodes holding it agree on its token.
func (n *Node) RaiseFence(ctx context.Context, t Target, holdToken string, fence uint64) error {
	hold, own, err := n.keys(t)
	if err != nil {
		return err
	}
	if err := checkToken(holdToken); err != nil {
		return err
	}
	return raiseFenceScript.Run(ctx, n.client, []string{fenceKey(n.prefix, own), hold}, strconv.FormatUint(fence, 10), holdToken).Err()
}

// Holder reports a single server's holder of key: the lock's, or of a
// semaphore the live holder that expires last; ErrNotHeld when none.
func (n *Node) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	own, err := n.ownKey(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	res, err := holderScript.Run(ctx, n.client, []string{own, own + ":values"}).Slice()
	if errors.Is(err, goredis.Nil) {
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	if err != nil {
		return backends.HolderInfo{}, err
	}
	if len(res) != 3 {
		return backends.HolderInfo{}, fmt.Errorf("redis: holder.lua returned %d values, want 3", len(res))
	}
	v, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	fence, ok3 := res[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return backends.HolderInfo{}, fmt.Errorf("redis: holder.lua returned %T, %T, %T, want string, integer, string", res[0], res[1], res[2])
	}
	var info backends.HolderInfo
	if v != "" {
		info.Value = []byte(v)
	}
	info.TTL = remaining(pttl)
	if fence != "" {
		var err error
		if info.Fence, err = strconv.ParseUint(fence, 10, 64); err != nil {
			return backends.HolderInfo{}, fmt.Errorf("redis: holder.lua returned the fencing token %q: %w", fence, err)
		}
	}
	return info, nil
}

// Held is one live hold of a key on a Redlock node.
type Held struct {
	// Target is where the hold is: the key's lock, or one of its slots.
	Target Target
	// Token and Value are the hold's.
	Token string
	Value []byte
	// Fence is the fencing token recorded with the hold: the counter the
	// node drew for it, or the token Redlock's write-back set; 0 if none.
	Fence uint64
	// TTL is the remaining time to live as the server reports it.
	TTL time.Duration
}

// Holds lists the live holds of key on a Redlock node, lock or slots, in
// slot order; none when key is free.
func (n *Node) Holds(ctx context.Context, key string) ([]Held, error) {
	own, err := n.ownKey(key)
	if err != nil {
		return nil, err
	}
	res, err := holdsScript.Run(ctx, n.client, []string{own}).Slice()
	if err != nil || len(res) == 0 {
		return nil, err
	}
	limit, ok := res[0].(int64)
	if !ok || len(res)%3 != 1 {
		return nil, fmt.Errorf("redis: holds.lua returned %d values starting with %T", len(res), res[0])
	}
	out := make([]Held, 0, len(res)/3)
	for i := 1; i < len(res); i += 3 {
		slot, ok1 := res[i].(int64)
		v, ok2 := res[i+1].(string)
		pttl, ok3 := res[i+2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return nil, errors.New("redis: holds.lua returned a malformed hold")
		}
		h := Held{Target: Target{Key: key}, Token: v, TTL: remaining(pttl)}
		if limit > 1 {
			h.Target.Slot, h.Target.Slots = int(slot), int(limit)
		}
		head, val, found := strings.Cut(v, "\n")
		if found && val != "" {
			h.Value = []byte(val)
		}
		h.Token = head
		if tok, fence, found := strings.Cut(head, "\t"); found {
			h.Token = tok
			if h.Fence, err = strconv.ParseUint(fence, 10, 64); err != nil {
				return nil, fmt.Errorf("redis: a hold of %q records the fencing token %q: %w", key, fence, err)
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// remaining is a PTTL reply as a duration: zero for a key without expiry.
func remaining(pttl int64) time.Duration {
	return time.Duration(max(pttl, 0)) * time.Millisecond
}
