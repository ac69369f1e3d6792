package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the resource's database, embedded: pure Go

	"github.com/dsync-dev/dsync/fence"
)

// resource is what the stale write's holders write to: a database of its
// own, apart from the servers under test, whose writes commit only through
// fence's SQL guard, which checks each write's fencing token in the same
// transaction.
type resource struct {
	what  string // for the story
	write func(ctx context.Context, name string, token uint64, v string) error
	close func() error
}

// startResource creates the resource: a SQLite database in a new
// temporary directory (the pure-Go driver, in this process), with the
// guard's fence table and a table of reports, one row per name.
func startResource(ctx context.Context) (*resource, error) {
	dir, err := os.MkdirTemp("", "dsync-demo-resource-")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "reports.db")
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	closeAll := func() error { return errors.Join(db.Close(), os.RemoveAll(dir)) }
	g, err := fence.NewSQL(db, fence.SQLite, nil)
	if err == nil {
		err = g.CreateTable(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE reports (name TEXT PRIMARY KEY, body TEXT NOT NULL)`)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the resource's database: %w", err), closeAll())
	}
	return &resource{
		what: fmt.Sprintf("a SQLite database (%s), written through fence's SQL guard", file),
		write: func(ctx context.Context, name string, token uint64, v string) error {
			return g.Do(ctx, name, token, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx,
					`INSERT INTO reports (name, body) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET body = excluded.body`, name, v)
				return err
			})
		},
		close: closeAll,
	}, nil
}
