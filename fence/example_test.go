package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/locker"
)

// The SQL guard runs the writes of a lease's holder in a transaction that
// commits only if the lease's token is not stale. The database is
// PostgreSQL through pgx's database/sql driver (import
// _ "github.com/jackc/pgx/v5/stdlib"); any driver does. Not run here: it
// needs a server (tests/fence runs the guard on PostgreSQL and SQLite).
func ExampleSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	guard, err := fence.NewSQL(db, fence.Postgres, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx); err != nil { // once, or in a migration
		log.Fatal(err)
	}

	lease := acquire(ctx, "ledger")
	defer lease.Release(ctx)
	err = guard.Do(ctx, "ledger", lease.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", 100, 42)
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		// A newer holder has written: this lease is lost, and the
		// transaction was rolled back.
		return
	}
	if err != nil {
		log.Fatal(err)
	}
}

// A script of your own runs under the Redis guard: it sees its own KEYS
// and ARGV, and runs only if the token is not stale. Not run here: it
// needs a Redis server.
func ExampleRedis_Run() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	guard, err := fence.NewRedis(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Move an amount between two balances, atomically with the check.
	transfer := fence.NewScript(`
redis.call("DECRBY", KEYS[1], ARGV[1])
return redis.call("INCRBY", KEYS[2], ARGV[1])`)

	lease := acquire(ctx, "ledger")
	defer lease.Release(ctx)
	to, err := guard.Run(ctx, transfer, "ledger", lease.Token(),
		[]string{"{ledger}:alice", "{ledger}:bob"}, 100).Int64()
	if errors.Is(err, fence.ErrStale) {
		return // lost: nothing moved
	}
	if err != nil {
		log.Fatal(err)
	}
	_ = to
}

// acquire takes the lock name on the backend of $DSYNC_URL (say
// redis://localhost:6379), as an application would; the backend stays
// open for the life of the program.
func acquire(ctx context.Context, name string) dsync.Lease {
	b, err := dsync.Open(ctx, os.Getenv("DSYNC_URL"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := locker.New(b, name, nil)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return lease
}
