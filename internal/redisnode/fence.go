package redisnode

import (
	"strings"
	"sync"
)

// Fence counters are kept per Redis Cluster hash slot, not per key: the
// counter of key K is P + "fence:{T}", where T is a short tag that hashes
// to the slot of K's hold P{K}. Every hold of K increments it, so K's
// tokens still grow with every hold, while a fleet that locks an unbounded
// set of names leaves at most clusterSlots counters behind (per prefix),
// and a hold of a name never used before increments an existing counter
// instead of creating one. The tag keeps the counter in the hold's slot,
// so each script still touches a single slot on Redis Cluster.

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// FenceKey returns the Redis key of the fence counter that key's holds
// draw their tokens from, under the key prefix prefix (Options.Prefix,
// DefaultPrefix when empty). Names in the same Redis Cluster hash slot
// share it. For operators and tests; the driver computes it itself.
func FenceKey(prefix, key string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return fenceKey(prefix, prefix+"{"+key+"}")
}

// fenceKey returns the fence counter's key for the hold key hold.
func fenceKey(prefix, hold string) string {
	t := slotTags()[hashSlot(hold)]
	return prefix + "fence:{" + string(t[:]) + "}"
}

// hashSlot is the Redis Cluster hash slot of the Redis key k: CRC16 of its
// hash tag (the bytes between its first "{" and the next "}", when not
// empty) or else of the whole key, modulo clusterSlots.
func hashSlot(k string) uint16 {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			k = k[i+1 : i+1+j]
		}
	}
	return crc16(k) % clusterSlots
}

// crcTable drives crc16.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the hash of
// Redis Cluster.
func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// tagAlphabet spells the slot tags: printable, without braces.
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"

// slotTags maps each hash slot to the first three-character tag, in
// tagAlphabet order, that hashes to it (every slot has one: TestSlotTags).
// Built on first use, in about a millisecond.
var slotTags = sync.OnceValue(func() *[clusterSlots][3]byte {
	var tags [clusterSlots][3]byte
	var found [clusterSlots]bool
	left := clusterSlots
	var t [3]byte
	for _, a := range []byte(tagAlphabet) {
		for _, b := range []byte(tagAlphabet) {
			for _, c := range []byte(tagAlphabet) {
				t = [3]byte{a, b, c}
				s := crc16(string(t[:])) % clusterSlots
				if !found[s] {
					tags[s], found[s] = t, true
					if left--; left == 0 {
						return &tags
					}
				}
			}
		}
	}
	return &tags // not reached: TestSlotTags finds every slot a tag
})
