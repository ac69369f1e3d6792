package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/locker"
)

// A holder paused past its TTL loses its lease; its successor writes; the
// first one wakes up and writes too, with its older token, and the SQL
// guard refuses it: its transaction is rolled back. The lock is on the
// memory backend, the resource an SQLite database, so that the example
// runs anywhere.
func Example_sqlite() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file::memory:?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection, one in-memory database
	guard, err := fence.NewSQL(db, fence.SQLite, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (entry TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	write := func(lease dsync.Lease, entry string) error {
		return guard.Do(ctx, "ledger", lease.Token(), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (entry) VALUES (?)", entry)
			return err
		})
	}

	b, err := dsync.Open(ctx, "memory://example-sqlite")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	l, err := locker.New(b, "ledger", &locker.Options{TTL: 50 * time.Millisecond, DriftMin: -1})
	if err != nil {
		log.Fatal(err)
	}
	old, err := l.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder:", write(old, "first"))
	<-old.Done() // paused: not extended, lost when its validity runs out
	cur, err := l.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer cur.Release(ctx)
	fmt.Println("next holder:", write(cur, "next"))
	fmt.Println("first holder, late:", write(old, "late"))

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("entries:", n)
	// Output:
	// first holder: <nil>
	// next holder: <nil>
	// first holder, late: dsync: fence: stale token: "ledger": token 1 is below 2, the largest the resource has accepted
	// entries: 2
}
