package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"
	_ "github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/fencetest"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	_ "github.com/dsync-dev/dsync/redlock"
	"github.com/dsync-dev/dsync/tests/pgtest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// sqlStore is the suite's adapter of the SQL guard: a name's value is a
// row of table vals, its log the rows of table log in the order of their
// ids; each write is one Do.
type sqlStore struct {
	g       *fence.SQL
	db      *sql.DB
	dialect fence.Dialect
}

func newSQLStore(t *testing.T, db *sql.DB, d fence.Dialect) *sqlStore {
	t.Helper()
	g, err := fence.NewSQL(db, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(t.Context()); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	ddl := []string{
		"CREATE TABLE vals (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
		"CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, token BIGINT NOT NULL)",
	}
	if d == fence.Postgres {
		ddl[1] = "CREATE TABLE log (id bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL)"
	}
	for _, q := range ddl {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return &sqlStore{g: g, db: db, dialect: d}
}

// q rewrites the $n placeholders of query for the store's dialect.
func (s *sqlStore) q(query string) string {
	if s.dialect == fence.SQLite {
		return strings.ReplaceAll(query, "$", "?")
	}
	return query
}

func (s *sqlStore) Write(ctx context.Context, name string, token uint64, value string) error {
	return s.g.Do(ctx, name, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q("INSERT INTO vals (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value"), name, value)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q("INSERT INTO log (name, token) VALUES ($1, $2)"), name, int64(token))
		return err
	})
}

func (s *sqlStore) WriteThenFail(ctx context.Context, name string, token uint64) error {
	return s.g.Do(ctx, name, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q("INSERT INTO no_such_table (name) VALUES ($1)"), name)
		return err
	})
}

func (s *sqlStore) Read(ctx context.Context, name string) (string, []uint64, error) {
	var value string
	err := s.db.QueryRowContext(ctx, s.q("SELECT value FROM vals WHERE name = $1"), name).Scan(&value)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q("SELECT token FROM log WHERE name = $1 ORDER BY id"), name)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	var log []uint64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			return "", nil, err
		}
		log = append(log, uint64(tok))
	}
	return value, log, rows.Err()
}

func (s *sqlStore) Fence(ctx context.Context, name string) (uint64, error) {
	return s.g.Token(ctx, name)
}

func (s *sqlStore) MaxToken() uint64 { return math.MaxInt64 }

// openSQLite opens a database file of its own for the test. The busy
// timeout makes a writer wait for another's transaction instead of failing
// with SQLITE_BUSY.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "fence.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestPostgres runs the guards' suite, and the tests of the SQL guard, on
// a real PostgreSQL: one throwaway cluster, a database per test.
func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	newDB := func(t *testing.T) *sql.DB { return srv.NewDB(t) }
	t.Run("Suite", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Store { return newSQLStore(t, newDB(t), fence.Postgres) })
	})
	runSQLTests(t, newDB, fence.Postgres)
}

// TestSQLite runs the same on SQLite (modernc.org/sqlite, pure Go), a
// database file per test.
func TestSQLite(t *testing.T) {
	t.Run("Suite", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fencetest.Store { return newSQLStore(t, openSQLite(t), fence.SQLite) })
	})
	runSQLTests(t, func(t *testing.T) *sql.DB { return openSQLite(t) }, fence.SQLite)
}

func runSQLTests(t *testing.T, newDB func(t *testing.T) *sql.DB, d fence.Dialect) {
	t.Run("CallerTransaction", func(t *testing.T) { testCallerTransaction(t, newSQLStore(t, newDB(t), d)) })
	t.Run("Panic", func(t *testing.T) { testPanic(t, newSQLStore(t, newDB(t), d)) })
	t.Run("OneStatement", func(t *testing.T) { testOneStatement(t, newDB(t), d) })
	t.Run("Table", func(t *testing.T) { testTable(t, newDB(t), d) })
	t.Run("LateHolder", func(t *testing.T) {
		testLateHolder(t, func(t *testing.T) fencetest.Store { return newSQLStore(t, newDB(t), d) })
	})
}

// testCallerTransaction: Check in a transaction of the caller's fences its
// writes; a rollback after it leaves the fence unchanged.
func testCallerTransaction(t *testing.T, s *sqlStore) {
	ctx := t.Context()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.g.Check(ctx, tx, "n", 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.g.Token(ctx, "n"); err != nil || tok != 0 {
		t.Errorf("fence %d, %v after a rollback; want 0", tok, err)
	}
	tx, err = s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.g.Check(ctx, tx, "n", 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.g.Check(ctx, tx, "n", 6); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Check with a stale token: %v", err)
	}
	if err := s.g.Check(ctx, nil, "n", 8); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("Check(nil tx): %v", err)
	}
}

// testPanic: a panic in Do's function rolls back and goes on.
func testPanic(t *testing.T, s *sqlStore) {
	ctx := t.Context()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_ = s.g.Do(ctx, "n", 5, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, s.q("INSERT INTO vals (name, value) VALUES ($1, $2)"), "n", "x"); err != nil {
				t.Error(err)
			}
			panic("boom")
		})
	}()
	if v, log, err := s.Read(ctx, "n"); err != nil || v != "" || len(log) != 0 {
		t.Errorf("after a panic: %q, %v, %v; want nothing written", v, log, err)
	}
	if tok, err := s.g.Token(ctx, "n"); err != nil || tok != 0 {
		t.Errorf("fence %d, %v after a panic; want 0", tok, err)
	}
}

// testOneStatement is the form for a token kept in the resource's own row
// (docs/fencing.md): one UPDATE whose WHERE compares the row's fence, and
// a count of the rows it changed.
func testOneStatement(t *testing.T, db *sql.DB, d fence.Dialect) {
	ctx := t.Context()
	s := &sqlStore{dialect: d}
	for _, q := range []string{
		"CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO accounts (id, balance) VALUES (1, 100)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	update := func(token uint64, balance int) int64 {
		res, err := db.ExecContext(ctx, s.q("UPDATE accounts SET balance = $2, fence = $3 WHERE id = $1 AND fence <= $3"), 1, balance, int64(token))
		if err != nil {
			t.Fatal(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := update(5, 150); n != 1 {
		t.Fatalf("token 5: %d rows, want 1", n)
	}
	if n := update(5, 160); n != 1 {
		t.Fatalf("token 5 again: %d rows, want 1", n)
	}
	if n := update(4, 90); n != 0 {
		t.Fatalf("stale token 4: %d rows, want 0", n)
	}
	var balance, fenced int64
	if err := db.QueryRowContext(ctx, "SELECT balance, fence FROM accounts WHERE id = 1").Scan(&balance, &fenced); err != nil {
		t.Fatal(err)
	}
	if balance != 160 || fenced != 5 {
		t.Errorf("balance %d, fence %d; want 160, 5", balance, fenced)
	}
}

// testTable: a fence table of another name, schema-qualified on
// PostgreSQL, and names that are no table are refused.
func testTable(t *testing.T, db *sql.DB, d fence.Dialect) {
	ctx := t.Context()
	table := "my_fence"
	if d == fence.Postgres {
		if _, err := db.ExecContext(ctx, "CREATE SCHEMA app"); err != nil {
			t.Fatal(err)
		}
		table = "app.my_fence"
	}
	g, err := fence.NewSQL(db, d, &fence.SQLOptions{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable twice: %v", err)
	}
	if err := g.Do(ctx, "n", 3, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var tok int64
	if err := db.QueryRowContext(ctx, "SELECT token FROM "+table+" WHERE name = 'n'").Scan(&tok); err != nil || tok != 3 {
		t.Errorf("the fence row in %s: %d, %v", table, tok, err)
	}
	for _, bad := range []string{"1abc", "a-b", "a;DROP TABLE x", "a.b.c", "a b", `"q"`} {
		if _, err := fence.NewSQL(db, d, &fence.SQLOptions{Table: bad}); !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("table %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// testLateHolder runs a real lock's late holder through the guard, on
// each backend that fences: single Redis, Redlock (5 masters) and etcd.
func testLateHolder(t *testing.T, newStore func(t *testing.T) fencetest.Store) {
	t.Run("redis", func(t *testing.T) {
		fencetest.LateHolder(t, newStore(t), testutil.Open(t, redistest.Start(t, nil).URL()), 200*time.Millisecond)
	})
	t.Run("redlock", func(t *testing.T) {
		var addrs []string
		for _, s := range redistest.StartN(t, 5, nil) {
			addrs = append(addrs, s.Addr())
		}
		fencetest.LateHolder(t, newStore(t), testutil.Open(t, "redlock://"+strings.Join(addrs, ",")+"/?max_ttl=1s"), 300*time.Millisecond)
	})
	t.Run("etcd", func(t *testing.T) {
		cl := etcdtest.Start(t, nil)
		fencetest.LateHolder(t, newStore(t), testutil.Open(t, cl.URL()), cl.MinLeaseTTL())
	})
}

// TestSQLBadInput: every bad argument is an error matching
// dsync.ErrInvalid, before any I/O, and Do does not call its function.
func TestSQLBadInput(t *testing.T) {
	ctx := t.Context()
	db := openSQLite(t)
	if _, err := fence.NewSQL(nil, fence.SQLite, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("NewSQL(nil db): %v", err)
	}
	for _, d := range []fence.Dialect{0, 99} {
		if _, err := fence.NewSQL(db, d, nil); !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("NewSQL(dialect %v): %v", d, err)
		}
	}
	g, err := fence.NewSQL(db, fence.SQLite, nil)
	if err != nil {
		t.Fatal(err)
	}
	called := false
	fn := func(*sql.Tx) error { called = true; return nil }
	for what, err := range map[string]error{
		"empty name":     g.Do(ctx, "", 1, fn),
		"token 0":        g.Do(ctx, "n", 0, fn),
		"token 2^63":     g.Do(ctx, "n", math.MaxInt64+1, fn),
		"nil fn":         g.Do(ctx, "n", 1, nil),
		"Token of empty": second(g.Token(ctx, "")),
	} {
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		} else if !strings.HasPrefix(err.Error(), "dsync: fence: invalid ") {
			t.Errorf("%s: %q does not say it is invalid input to the guard", what, err)
		}
	}
	if called {
		t.Error("Do called its function on bad input")
	}
}

func second[T any](_ T, err error) error { return err }

// BenchmarkSQLGuard inserts a row in a transaction through the guard (Do)
// and in a plain one, on PostgreSQL and SQLite: the guard's cost is
// guarded/plain.
func BenchmarkSQLGuard(b *testing.B) {
	srv := pgtest.Start(b)
	for _, d := range []fence.Dialect{fence.Postgres, fence.SQLite} {
		b.Run(d.String(), func(b *testing.B) {
			var db *sql.DB
			if d == fence.Postgres {
				db = srv.NewDB(b)
			} else {
				db = openSQLite(b)
			}
			ctx := b.Context()
			g, err := fence.NewSQL(db, d, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.CreateTable(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE rows (v TEXT NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			insert := func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO rows (v) VALUES ('value')")
				return err
			}
			var token uint64 // grows across the runs of the sub-benchmark
			b.Run("guarded", func(b *testing.B) {
				for range b.N {
					token++
					if err := g.Do(ctx, "bench", token, insert); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("plain", func(b *testing.B) {
				for range b.N {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := insert(tx); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
