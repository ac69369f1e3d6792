package redlock

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// persistence is one reading of whether a server persists every write
// before answering it, so that a crash, even SIGKILL or a power cut,
// loses no acknowledged hold or fence counter.
type persistence struct {
	durable bool
	// what says why not (or "AOF, appendfsync always"), for Health.
	what string
}

// queuePersistence queues, on a connection's pipeline, the commands that
// readPersistence reads.
func queuePersistence(ctx context.Context, p goredis.Pipeliner) (info *goredis.StringCmd, fsync, noRewrite *goredis.MapStringStringCmd) {
	// Two CONFIG GETs: servers before Redis 7 take one parameter each.
	return p.Info(ctx, "persistence"), p.ConfigGet(ctx, "appendfsync"), p.ConfigGet(ctx, "no-appendfsync-on-rewrite")
}

// readPersistence says whether the replies show a server that persists
// every write before answering: the append-only file on and complete
// (aof_enabled, no AOF rewrite in progress or scheduled: one is, just
// after AOF was turned on at runtime, until the file holds the whole
// data set), not loading, its last write succeeded, appendfsync always,
// and no-appendfsync-on-rewrite off. Anything it cannot read (CONFIG
// renamed, disabled or denied by an ACL; an older server lacking a field)
// counts as not durable.
func readPersistence(info *goredis.StringCmd, fsync, noRewrite *goredis.MapStringStringCmd) persistence {
	if err := info.Err(); err != nil {
		return persistence{what: fmt.Sprintf("INFO persistence failed: %v", err)}
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info.Val(), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	want := []struct{ field, value, why string }{
		{"aof_enabled", "1", "AOF off"},
		{"loading", "0", "loading its data"},
		{"aof_rewrite_in_progress", "0", "AOF rewrite in progress"},
		{"aof_rewrite_scheduled", "0", "AOF rewrite scheduled"},
		{"aof_last_write_status", "ok", "last AOF write failed"},
	}
	for _, w := range want {
		if v, ok := fields[w.field]; !ok || v != w.value {
			return persistence{what: w.why}
		}
	}
	if fields["async_loading"] == "1" {
		return persistence{what: "loading its data"}
	}
	if err := fsync.Err(); err != nil {
		return persistence{what: fmt.Sprintf("CONFIG GET appendfsync failed: %v", err)}
	}
	if v := fsync.Val()["appendfsync"]; v != "always" {
		if v == "" {
			return persistence{what: "CONFIG GET appendfsync answered nothing"}
		}
		return persistence{what: "appendfsync " + v}
	}
	if err := noRewrite.Err(); err != nil {
		return persistence{what: fmt.Sprintf("CONFIG GET no-appendfsync-on-rewrite failed: %v", err)}
	}
	if v := noRewrite.Val()["no-appendfsync-on-rewrite"]; v != "no" {
		return persistence{what: "no-appendfsync-on-rewrite " + v}
	}
	return persistence{durable: true, what: "AOF, appendfsync always"}
}
