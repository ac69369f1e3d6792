package redisnode

import (
	"strings"
	"testing"
)

// TestHashSlot checks hashSlot against the Redis Cluster specification's
// examples and the slots a Redis server reports (CLUSTER KEYSLOT).
func TestHashSlot(t *testing.T) {
	if c := crc16("123456789"); c != 0x31c3 {
		t.Errorf("crc16 of the check string = %#x, want 0x31c3 (CRC-16/XMODEM)", c)
	}
	for _, tc := range []struct {
		key  string
		slot uint16
	}{
		{"foo", 12182},
		{"somekey", 11058},
		{"{user1000}.following", 3443}, // the tag only: "user1000"
		{"user1000", 3443},
		{"foo{}{bar}", 8363},    // an empty tag: the whole key
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"{bar", 4015},
		{"foo{bar}{zap}", 5061}, // the first tag: "bar"
		{"bar", 5061},
	} {
		if got := hashSlot(tc.key); got != tc.slot {
			t.Errorf("hashSlot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
}

// TestSlotTags: every hash slot has a tag, of three characters without
// braces, and a fence key built on it lies in that slot.
func TestSlotTags(t *testing.T) {
	tags := slotTags()
	for slot, tag := range tags {
		s := string(tag[:])
		if len(strings.Trim(s, tagAlphabet)) != 0 || strings.ContainsAny(s, "{}") {
			t.Fatalf("slot %d: tag %q", slot, s)
		}
		if got := hashSlot("p:fence:{" + s + "}"); int(got) != slot {
			t.Fatalf("slot %d: its fence key hashes to slot %d", slot, got)
		}
	}
	for _, key := range []string{"job", "a}b", "{x}", "}starts", "long/name:with:colons"} {
		hold := "p:{" + key + "}"
		if a, b := hashSlot(hold), hashSlot(fenceKey("p:", hold)); a != b {
			t.Errorf("key %q: hold in slot %d, fence counter in slot %d", key, a, b)
		}
	}
}

func BenchmarkFenceKey(b *testing.B) {
	slotTags()
	for b.Loop() {
		_ = fenceKey("dsync:", "dsync:{some/lock-name-42}")
	}
}
