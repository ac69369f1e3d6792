package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
)

// Dialect is the SQL of a database the SQL guard writes to.
type Dialect int

// The dialects the SQL guard speaks, each tested against a real server.
const (
	// Postgres: PostgreSQL 9.5 or later (INSERT ... ON CONFLICT), through
	// any driver (pgx's stdlib, lib/pq).
	Postgres Dialect = iota + 1
	// SQLite: SQLite 3.24 or later (UPSERT), through any driver. Give the
	// connection a busy timeout (modernc.org/sqlite:
	// "_pragma=busy_timeout(5000)"), or a writer that meets another's
	// transaction fails at once with SQLITE_BUSY instead of waiting.
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the fence table's default name.
const DefaultTable = "dsync_fence"

// SQLOptions configure an SQL guard. A nil *SQLOptions means defaults; a
// zero field means that field's default.
type SQLOptions struct {
	// Table is the fence table: one row per name, (name, token). Letters,
	// digits and underscores, not starting with a digit, optionally
	// qualified by a schema ("app.fence"). Default DefaultTable.
	Table string
	// TxOptions are the options of Do's transactions. Default nil: the
	// driver's default isolation level (READ COMMITTED on PostgreSQL, where
	// a writer waits for a concurrent one on the same name and then checks
	// its token against the committed fence; at REPEATABLE READ and above
	// it fails with a serialization error instead, to be retried).
	TxOptions *sql.TxOptions
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// SQL guards writes to a database through database/sql: the writes of Do
// commit only if their token is at least the largest its fence table holds
// for the name. Safe for concurrent use.
type SQL struct {
	db     *sql.DB
	txOpts *sql.TxOptions
	// Statements, with the table name in place.
	create, advance, read string
}

// NewSQL returns a guard that keeps its fence table in db and speaks
// dialect d. It makes no I/O; create the table with CreateTable (or by
// hand: see its doc). A nil db, an unknown dialect or a bad table name is
// an error matching dsync.ErrInvalid.
func NewSQL(db *sql.DB, d Dialect, opts *SQLOptions) (*SQL, error) {
	if db == nil {
		return nil, invalid("db", "nil")
	}
	var o SQLOptions
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if !tableName.MatchString(o.Table) {
		return nil, invalid("table", "%q: want letters, digits and underscores, not starting with a digit, optionally schema.table", o.Table)
	}
	g := &SQL{db: db, txOpts: o.TxOptions}
	switch d {
	case Postgres:
		g.create = "CREATE TABLE IF NOT EXISTS " + o.Table + " (name text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))"
		g.advance = "INSERT INTO " + o.Table + " AS f (name, token) VALUES ($1, $2) " +
			"ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token"
		g.read = "SELECT token FROM " + o.Table + " WHERE name = $1"
	case SQLite:
		g.create = "CREATE TABLE IF NOT EXISTS " + o.Table + " (name TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL CHECK (token > 0))"
		g.advance = "INSERT INTO " + o.Table + " AS f (name, token) VALUES (?1, ?2) " +
			"ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token"
		g.read = "SELECT token FROM " + o.Table + " WHERE name = ?1"
	default:
		return nil, invalid("dialect", "%v: want Postgres or SQLite", d)
	}
	return g, nil
}

// CreateTable creates the fence table if it does not exist. On PostgreSQL
// it is
//
//	CREATE TABLE IF NOT EXISTS dsync_fence (name text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))
//
// (INTEGER for bigint on SQLite); a table of your own with these two
// columns does as well.
func (g *SQL) CreateTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, g.create)
	return err
}

// Do runs fn in a transaction that first checks token against the fence of
// name (see Check), and commits only if the check passes and fn returns
// nil. A stale token returns an error matching ErrStale without calling
// fn; an error of fn is returned as it is. Either way the transaction is
// rolled back: nothing fn wrote is kept and the fence is unchanged. A
// panic in fn rolls back too, and goes on. Do blocks while another
// transaction holds the fence of name (on PostgreSQL, its row lock; on
// SQLite, the database's write lock), bounded by ctx.
func (g *SQL) Do(ctx context.Context, name string, token uint64, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return invalid("fn", "nil")
	}
	if err := checkWrite(name, token, maxInt64); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, g.txOpts)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := g.Check(ctx, tx, name, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	done = true
	return tx.Commit()
}

// Check is Do's check, for a transaction of the caller's: it raises the
// fence of name to token, or returns an error matching ErrStale if the
// fence holds a larger token. The raise is tx's: a rollback undoes it. On
// PostgreSQL it locks the fence's row until tx ends: a transaction that
// checks the same name meanwhile waits, then compares its token with what
// tx committed. Call it before the transaction's writes; they are fenced if
// tx commits after Check returned nil. Tokens above math.MaxInt64 (the
// largest a BIGINT holds) are refused, as are token 0 and an empty name,
// with an error matching dsync.ErrInvalid.
func (g *SQL) Check(ctx context.Context, tx *sql.Tx, name string, token uint64) error {
	if tx == nil {
		return invalid("tx", "nil")
	}
	if err := checkWrite(name, token, maxInt64); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, g.advance, name, int64(token))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	var cur int64
	if err := tx.QueryRowContext(ctx, g.read, name).Scan(&cur); err != nil {
		return fmt.Errorf("%w: %q: token %d refused; reading the fence: %w", ErrStale, name, token, err)
	}
	return stale(name, token, uint64(cur))
}

// Token returns the largest token the fence of name has accepted, or 0 if
// it has accepted none.
func (g *SQL) Token(ctx context.Context, name string) (uint64, error) {
	if name == "" {
		return 0, invalid("name", "empty")
	}
	var cur int64
	err := g.db.QueryRowContext(ctx, g.read, name).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if cur < 0 {
		return 0, fmt.Errorf("dsync: fence: the fence of %q holds %d, not a token", name, cur)
	}
	return uint64(cur), nil
}
