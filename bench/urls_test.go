package main

import (
	"context"
	"testing"
	"time"
)

// TestURLTargets measures dsync on a URL given with -url, as on a user's
// servers: one target per URL, in the scenarios -url allows.
func TestURLTargets(t *testing.T) {
	var targets []*target
	closeAll, err := urlTargets(context.Background(), []string{"memory://bench-url-a", "memory://bench-url-b"}, &targets)
	defer closeAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 2 || targets[0].group != "memory://bench-url-a" || !targets[0].cycles || !targets[0].contended {
		t.Fatalf("targets: %+v", targets)
	}
	for _, tg := range targets {
		defer tg.close()
		s, err := runCycles(context.Background(), tg, 2, 30*time.Millisecond, func(int) string { return nextKey("u") })
		if err != nil || s.Cycles == 0 {
			t.Errorf("%s: %+v, %v", tg.id(), s, err)
		}
	}
	if _, err := urlTargets(context.Background(), []string{"nosuch://x"}, new([]*target)); err == nil {
		t.Error("an unknown scheme opened")
	}
}
