package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/fence/etcdfence"
)

// Store is the fenced store: a resource kept on a store of its own, apart
// from the servers under test and never faulted, written through a fence
// guard, which accepts a write only if its fencing token is at least the
// largest it accepted for the resource; the store keeps every accepted
// write in order. It plays the part of the database a lock protects. The
// guard is package fence's Redis guard on a redis-server, fence/etcdfence's
// on an etcd, or package fence's SQL guard on a PostgreSQL database or a
// SQLite file. Safe for concurrent use.
type Store struct {
	kind  string // "redis", "etcd", "postgres" or "sqlite"
	addr  string // as OpenStore was given it
	redis *goredis.Client
	rg    *fence.Redis
	etcd  *clientv3.Client
	eg    *etcdfence.Guard
	db    *sql.DB
	sg    *fence.SQL
}

// StoreWrite is one accepted write, as the store keeps it.
type StoreWrite struct {
	Writer string        // the worker's ID
	Seq    int           // the write's number among the writer's writes, from 1
	Token  uint64        // the fencing token the write carried
	Stamp  time.Duration // CLOCK_MONOTONIC when the writer sent it
}

func (w StoreWrite) entry() string {
	return fmt.Sprintf("%s %d %d %d", w.Writer, w.Seq, w.Token, int64(w.Stamp))
}

func parseEntry(s string) (StoreWrite, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return StoreWrite{}, fmt.Errorf("torture: store entry %q: want 4 fields", s)
	}
	seq, err1 := strconv.Atoi(f[1])
	tok, err2 := strconv.ParseUint(f[2], 10, 64)
	st, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return StoreWrite{}, fmt.Errorf("torture: store entry %q: malformed", s)
	}
	return StoreWrite{Writer: f[0], Seq: seq, Token: tok, Stamp: time.Duration(st)}, nil
}

// Prefixes of store addresses (see OpenStore).
const (
	EtcdStore     = "etcd://"     // the comma-separated host:port of an etcd's members
	PostgresStore = "postgres://" // the rest of a PostgreSQL URL
	SQLiteStore   = "sqlite:"     // a file's path
)

// sqliteBusyTimeout is how long a SQLite writer waits for another's
// transaction before it fails with SQLITE_BUSY. Every worker process
// writes the same file: generous, for two busy cores under the race
// detector (a worker's write gives up sooner, when its context of 5 s
// ends).
const sqliteBusyTimeout = 20 * time.Second

// OpenStore connects to the store at addr: host:port of a redis-server,
// written through fence.Redis; "etcd://" and the comma-separated
// host:port of an etcd's members, written through etcdfence; a PostgreSQL
// URL ("postgres://" or "postgresql://", through pgx's database/sql
// driver) or "sqlite:" and the path of a SQLite file (modernc.org/sqlite,
// in WAL mode, which several processes may write), written through
// fence.SQL. It makes no I/O: a new SQL store needs its tables, which
// Setup creates, called once before the first write. Writes are never
// retried by the client: a write is sent once, so that an acknowledged
// write was applied exactly once (database/sql repeats a request only when
// its driver says it was never sent, driver.ErrBadConn).
func OpenStore(addr string) (*Store, error) {
	if path, ok := strings.CutPrefix(addr, SQLiteStore); ok {
		if path == "" {
			return nil, fmt.Errorf("torture: the store at %q: no file", addr)
		}
		// Pragmas run in this order on each new connection: the busy
		// timeout first, so that switching to WAL waits for a writer too.
		db, err := sql.Open("sqlite", "file:"+path+fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)", sqliteBusyTimeout.Milliseconds()))
		if err != nil {
			return nil, fmt.Errorf("torture: the store at %s: %w", addr, err)
		}
		return openSQL("sqlite", addr, db, fence.SQLite)
	}
	if strings.HasPrefix(addr, PostgresStore) || strings.HasPrefix(addr, "postgresql://") {
		db, err := sql.Open("pgx", addr)
		if err != nil {
			return nil, fmt.Errorf("torture: the store at %s: %w", redact(addr), err)
		}
		return openSQL("postgres", addr, db, fence.Postgres)
	}
	if eps, ok := strings.CutPrefix(addr, EtcdStore); ok {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   strings.Split(eps, ","),
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("torture: the store at %s: %w", addr, err)
		}
		g, err := etcdfence.New(c, nil)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		return &Store{kind: "etcd", addr: addr, etcd: c, eg: g}, nil
	}
	c := goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	g, err := fence.NewRedis(c, nil)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return &Store{kind: "redis", addr: addr, redis: c, rg: g}, nil
}

func openSQL(kind, addr string, db *sql.DB, d fence.Dialect) (*Store, error) {
	g, err := fence.NewSQL(db, d, nil)
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &Store{kind: kind, addr: addr, db: db, sg: g}, nil
}

// redact returns addr with the password of a URL replaced by "xxxxx".
func redact(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.User == nil {
		return addr
	}
	return u.Redacted()
}

// Kind names the store: "redis", "etcd", "postgres" or "sqlite".
func (s *Store) Kind() string { return s.kind }

// String returns the store's kind and address, a password in it replaced
// by "xxxxx".
func (s *Store) String() string { return s.kind + " at " + redact(s.addr) }

// The SQL stores' table of accepted writes, beside the guard's fence
// table: one row per write, numbered in the order the rows were inserted.
const (
	writesTable        = "torture_writes"
	pgCreateWrites     = "CREATE TABLE IF NOT EXISTS " + writesTable + " (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, resource text NOT NULL, entry text NOT NULL)"
	sqliteCreateWrites = "CREATE TABLE IF NOT EXISTS " + writesTable + " (id INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, entry TEXT NOT NULL)"
	writesIndex        = "CREATE INDEX IF NOT EXISTS " + writesTable + "_resource ON " + writesTable + " (resource, id)"
)

// Setup makes the store ready for its first write: on PostgreSQL and
// SQLite it creates the guard's fence table and the table of writes, if
// they do not exist; on Redis and etcd it does nothing. Call it once, from
// the harness, before starting the workers: concurrent CREATE TABLE IF NOT
// EXISTS can fail on PostgreSQL, and the workers only write.
func (s *Store) Setup(ctx context.Context) error {
	if s.db == nil {
		return nil
	}
	create := pgCreateWrites
	if s.kind == "sqlite" {
		create = sqliteCreateWrites
	}
	if err := s.sg.CreateTable(ctx); err != nil {
		return fmt.Errorf("torture: the store (%s): creating the fence table: %w", s, err)
	}
	for _, q := range []string{create, writesIndex} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("torture: the store (%s): %s: %w", s, q, err)
		}
	}
	return nil
}

// listKey is the Redis list of resource's accepted writes, in the hash
// slot of the guard's fence key for it.
func listKey(resource string) string { return "writes:{" + resource + "}" }

// insertWrite inserts one row of writesTable, in the placeholders of the
// store's dialect.
func (s *Store) insertWrite() string {
	if s.kind == "sqlite" {
		return "INSERT INTO " + writesTable + " (resource, entry) VALUES (?, ?)"
	}
	return "INSERT INTO " + writesTable + " (resource, entry) VALUES ($1, $2)"
}

// writesDir is the etcd prefix of resource's accepted writes, one key per
// write, in the order of their revisions.
func writesDir(resource string) string { return "writes/" + resource + "/" }

var appendScript = fence.NewScript(`return redis.call("RPUSH", KEYS[1], ARGV[1])`)

// Write offers w to resource through the guard, with fencing token
// token; with token 0 (fencing off, or the unguarded negative control) it
// writes without the guard, and the store accepts it. It reports whether
// the store accepted the write; on an error the outcome is unknown.
func (s *Store) Write(ctx context.Context, resource string, token uint64, w StoreWrite) (bool, error) {
	var err error
	switch {
	case s.db != nil && token == 0:
		_, err = s.db.ExecContext(ctx, s.insertWrite(), resource, w.entry())
	case s.db != nil:
		err = s.sg.Do(ctx, resource, token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.insertWrite(), resource, w.entry())
			return err
		})
	case s.kind == "etcd":
		// A key of its own per write, even for a worker that reuses an ID.
		op := clientv3.OpPut(fmt.Sprintf("%s%s/%d/%d", writesDir(resource), w.Writer, w.Seq, int64(w.Stamp)), w.entry())
		if token == 0 {
			_, err = s.etcd.Do(ctx, op)
		} else {
			_, err = s.eg.Txn(ctx, resource, token).Then(op).Commit()
		}
	case token == 0:
		err = s.redis.RPush(ctx, listKey(resource), w.entry()).Err()
	default:
		err = s.rg.Run(ctx, appendScript, resource, token, []string{listKey(resource)}, w.entry()).Err()
	}
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// Writes returns the writes the store accepted for resource, in the order
// it accepted them.
//
// On the SQL stores that order is the rows' ids, and id order is commit
// order for the guarded writes: a row's id is drawn by its INSERT, which
// runs after the guard's check, and the check makes the writers of one
// resource (the guard's name) go one at a time, until commit (on
// PostgreSQL the fence row's lock, on SQLite the database's write lock);
// the next writer of the resource draws its id after this one committed.
// The unguarded writes of the negative control are serialized on SQLite by
// the write lock as well, but on PostgreSQL nothing orders them: two
// concurrent ones may commit in the other order than their ids. The ids
// still order two writes one of which was sent after the other was
// acknowledged, and that is the case the control is built on: the paused
// holder is continued only once the next holder's write was accepted, so
// its late write comes after it here.
func (s *Store) Writes(ctx context.Context, resource string) ([]StoreWrite, error) {
	var entries []string
	switch {
	case s.db != nil:
		var err error
		if entries, err = s.sqlWrites(ctx, resource); err != nil {
			return nil, err
		}
	case s.kind == "etcd":
		resp, err := s.etcd.Get(ctx, writesDir(resource), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			entries = append(entries, string(kv.Value))
		}
	default:
		var err error
		if entries, err = s.redis.LRange(ctx, listKey(resource), 0, -1).Result(); err != nil {
			return nil, err
		}
	}
	out := make([]StoreWrite, 0, len(entries))
	for _, e := range entries {
		w, err := parseEntry(e)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

func (s *Store) sqlWrites(ctx context.Context, resource string) ([]string, error) {
	q := "SELECT entry FROM " + writesTable + " WHERE resource = $1 ORDER BY id"
	if s.kind == "sqlite" {
		q = strings.Replace(q, "$1", "?", 1)
	}
	rows, err := s.db.QueryContext(ctx, q, resource)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var entries []string
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, rows.Err()
}

// Close closes the connections.
func (s *Store) Close() error {
	switch {
	case s.db != nil:
		return s.db.Close()
	case s.etcd != nil:
		return s.etcd.Close()
	}
	return s.redis.Close()
}
