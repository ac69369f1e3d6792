// Package redis is the single-instance Redis backend of dsync: locks and
// counting semaphores (up to 4096 holders) on one Redis server, a
// Sentinel-managed primary or a Redis Cluster, with fencing tokens and
// release notices over pub/sub.
//
// Open it by URL after a blank import (redis:// and rediss://):
//
//	import _ "github.com/dsync-dev/dsync/backends/redis"
//
//	b, err := dsync.Open(ctx, "redis://:password@localhost:6379/0?prefix=myapp:")
//
// or hand New a go-redis client you already have:
//
//	b, err := redis.New(client, &redis.Options{Prefix: "myapp:"})
//
// What it promises: mutual exclusion, and at most a semaphore's size of
// live holders, while the one server keeps its data. Replication is
// asynchronous, so a failover or a restart without persistence can grant a
// hold twice and repeat fencing tokens; expiry follows the server's clock.
// For locks that survive the loss of a server, use package redlock.
//
// Waiters of a lock are served in order of their Acquire calls, across
// processes, with bounded barging (see docs/redis.md, "Waiters in order").
// Semaphores keep no line.
//
// What blocks: each method makes one round trip, bounded by its context
// (two for a lock's refused plain attempt, unfenced and outside the line:
// the second asks which limit holds the key);
// a URL-opened client never retries on its own. WatchReleases dials one
// shared pub/sub connection.
//
// Nothing is logged: a client opened from a URL reports through errors
// only; a client passed to New logs as its application set go-redis.
//
// What is left behind: holds, places in line and the line itself expire on
// the server, a line with its last live waiter's TTL;
// each Cluster hash slot keeps one fence counter per prefix, forever.
// Close stops the pub/sub connection and closes a client opened from a URL.
//
// The key layout, the scripts and the reasoning are in docs/redis.md.
package redis
