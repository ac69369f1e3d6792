package torture

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/leader"
	"github.com/dsync-dev/dsync/locker"
	"github.com/dsync-dev/dsync/redlock"
	"github.com/dsync-dev/dsync/semaphore"
)

// Role is the worker role of the torture suite (see internal/testenv/proc): a
// process that loops acquire, critical section on the fenced store,
// release, and reports every step as an event.
const Role = "torture"

// Primitives a worker can exercise (WorkerConfig.Prim).
const (
	PrimLock  = "lock"  // locker.Locker
	PrimSem   = "sem"   // semaphore.Semaphore of Size
	PrimElect = "elect" // leader.Election: campaign, lead, resign
	PrimNaive = "naive" // the naive majority sorted-set semaphore (a negative control)
)

func init() { proc.Register(Role, runWorker) }

// WorkerConfig is what a torture worker does. It travels to the worker as
// proc arguments (Args).
type WorkerConfig struct {
	ID    string // writer name in the store; unique per worker
	Prim  string // PrimLock, PrimSem, PrimElect or PrimNaive
	Key   string // the lock, semaphore or election name
	Store string // the fenced store's address (see OpenStore)
	TTL   time.Duration
	Size  int // semaphore size; 1 for locks and elections
	// Writes is the number of fenced writes per critical section, each
	// after Work of sleep (the sleep before a write is where a pause hits:
	// the write then leaves late, like one delayed by a GC pause after the
	// writer last looked at its lease).
	Writes int
	Work   time.Duration
	// Gap is the sleep after a release before asking again.
	Gap time.Duration
	// AcquireTimeout bounds each Acquire (or Campaign); a timeout is
	// reported as an "unavailable" event and the worker asks again.
	AcquireTimeout time.Duration
	// NoFencing turns fencing tokens off (locker.Options.NoFencing): the
	// writes carry token 0, which the store always accepts.
	NoFencing bool
	// Unguarded writes to the store without its guard, though the holds
	// carry fencing tokens: the store accepts every write (the negative
	// control of the guards).
	Unguarded bool
	// Nodes are the Redis addresses of PrimNaive, or the Redlock masters
	// as this worker reaches them (comma-separated, in the URL's order):
	// a Redlock semaphore's worker then reports where each permit is held
	// (the "held" event).
	Nodes string
	// Holds bounds the number of holds; 0 means until SIGTERM.
	Holds int
}

// Args encodes c for proc.Start and proc.Spawn.
func (c WorkerConfig) Args() map[string]string {
	return map[string]string{
		"id": c.ID, "prim": c.Prim, "key": c.Key, "store": c.Store,
		"ttl": c.TTL.String(), "size": strconv.Itoa(max(c.Size, 1)),
		"writes": strconv.Itoa(c.Writes), "work": c.Work.String(), "gap": c.Gap.String(),
		"acquire_timeout": c.AcquireTimeout.String(), "nofence": strconv.FormatBool(c.NoFencing),
		"unguarded": strconv.FormatBool(c.Unguarded),
		"nodes":     c.Nodes, "holds": strconv.Itoa(c.Holds),
	}
}

func configOf(a proc.Args) WorkerConfig {
	nofence, _ := strconv.ParseBool(a.Str("nofence"))
	unguarded, _ := strconv.ParseBool(a.Str("unguarded"))
	return WorkerConfig{
		ID: a.Str("id"), Prim: a.Str("prim"), Key: a.Str("key"), Store: a.Str("store"),
		TTL: a.Duration("ttl"), Size: a.Int("size"), Writes: a.Int("writes"),
		Work: a.Duration("work"), Gap: a.Duration("gap"), AcquireTimeout: a.Duration("acquire_timeout"),
		NoFencing: nofence, Unguarded: unguarded, Nodes: a.Str("nodes"), Holds: a.Int("holds"),
	}
}

// Resource is the store resource a primitive's writes go to.
func Resource(prim, key string) string { return prim + ":" + key }

// hold is what every primitive hands out: a lease, a permit, a term.
type hold interface {
	Token() uint64
	Expires() time.Time
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// term adapts a leadership to hold.
type term struct{ *leader.Leadership }

func (t term) Token() uint64                     { return t.Term() }
func (t term) Release(ctx context.Context) error { return t.Resign(ctx) }

type acquireFunc func(ctx context.Context) (hold, error)

func newAcquirer(b *dsync.Backend, c WorkerConfig) (acquireFunc, func(), error) {
	opts := &locker.Options{TTL: c.TTL, NoFencing: c.NoFencing}
	switch c.Prim {
	case PrimLock:
		l, err := locker.New(b, c.Key, opts)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (hold, error) { return l.Acquire(ctx) }, func() {}, nil
	case PrimSem:
		s, err := semaphore.New(b, c.Key, c.Size, opts)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (hold, error) { return s.Acquire(ctx) }, func() {}, nil
	case PrimElect:
		e, err := leader.New(b, c.Key, c.ID, &leader.Options{TTL: c.TTL})
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (hold, error) {
			l, err := e.Campaign(ctx)
			if err != nil {
				return nil, err
			}
			return term{l.(*leader.Leadership)}, nil
		}, func() {}, nil
	case PrimNaive:
		n := newNaive(strings.Split(c.Nodes, ","), c.Key, c.Size, c.TTL)
		return n.acquire, n.close, nil
	}
	return nil, nil, errors.New("torture: unknown primitive " + strconv.Quote(c.Prim))
}

// classify names the cause of a failed acquisition for the
// "unavailable" event.
func classify(err error) string {
	switch {
	case errors.Is(err, redlock.ErrQuarantined):
		return "quarantined"
	case errors.Is(err, redlock.ErrNoQuorum):
		return "noquorum"
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(err, dsync.ErrNotAcquired):
		return "timeout"
	case errors.Is(err, dsync.ErrNotAcquired):
		return "notacquired"
	}
	return "error"
}

func stamp(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }

// monoOf converts a local time to CLOCK_MONOTONIC.
func monoOf(t time.Time) time.Duration { return proc.Monotonic() + time.Until(t) }

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Events a worker reports (fields after the name and stamp):
//
//	asked
//	acquired TOKEN EXPIRY             EXPIRY: the lease's expiry on CLOCK_MONOTONIC
//	held SLOT NODES HOLD              a Redlock permit's slot, the masters that hold it
//	                                  right after the grant (indexes, comma-separated),
//	                                  and its hold token; SLOT -1 when none holds it
//	write SEQ TOKEN START EXPIRY ok|rejected|err
//	lost TOKEN                        the lease ended without release (seen by the holder)
//	releasing TOKEN
//	released TOKEN ok|notheld|err
//	unavailable CLASS MILLIS          an Acquire that failed, and how long it took
func runWorker(ctx context.Context, b *dsync.Backend, a proc.Args, emit proc.Emit) error {
	c := configOf(a)
	store, err := OpenStore(c.Store)
	if err != nil {
		return err
	}
	defer store.Close()
	acquire, closeAcq, err := newAcquirer(b, c)
	if err != nil {
		return err
	}
	defer closeAcq()
	resource := Resource(c.Prim, c.Key)
	fenced := (c.Prim == PrimLock || c.Prim == PrimElect) && !c.Unguarded
	var where *masters // a Redlock semaphore's masters, to report each permit's place
	if c.Prim == PrimSem && c.Nodes != "" {
		where = newMasters(strings.Split(c.Nodes, ","), c.Key)
		defer where.close()
	}
	seq := 0
	for n := 0; c.Holds == 0 || n < c.Holds; n++ {
		if ctx.Err() != nil {
			return nil
		}
		emit("asked")
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, c.AcquireTimeout)
		h, err := acquire(actx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			emit("unavailable", classify(err), strconv.FormatInt(time.Since(start).Milliseconds(), 10))
			continue
		}
		tok := strconv.FormatUint(h.Token(), 10)
		emit("acquired", tok, stamp(monoOf(h.Expires())))
		if where != nil {
			where.reportPlace(ctx, h, emit)
		}
		var watch sync.WaitGroup
		watch.Go(func() {
			<-h.Done()
			if errors.Is(h.Err(), dsync.ErrLeaseLost) {
				emit("lost", tok)
			}
		})
		fence := uint64(0)
		if fenced {
			fence = h.Token()
		}
	section:
		for i := range c.Writes {
			// Not before the first write: the lease is fresh, and a pause
			// right after the "acquired" event must find the worker in the
			// sleep, about to write late.
			if i > 0 {
				select {
				case <-h.Done():
					break section
				default:
				}
			}
			if !sleep(ctx, c.Work) {
				break section
			}
			seq++
			st := proc.Monotonic()
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ok, err := store.Write(wctx, resource, fence, StoreWrite{Writer: c.ID, Seq: seq, Token: h.Token(), Stamp: st})
			cancel()
			outcome := "ok"
			switch {
			case err != nil:
				outcome = "err"
			case !ok:
				outcome = "rejected"
			}
			emit("write", strconv.Itoa(seq), tok, stamp(st), stamp(monoOf(h.Expires())), outcome)
			if outcome == "rejected" {
				break section // a newer holder wrote: this hold is stale
			}
		}
		emit("releasing", tok)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = h.Release(rctx)
		cancel()
		outcome := "ok"
		switch {
		case errors.Is(err, dsync.ErrNotHeld):
			outcome = "notheld"
		case err != nil:
			outcome = "err"
		}
		emit("released", tok, outcome)
		watch.Wait()
		if !sleep(ctx, c.Gap) {
			return nil
		}
	}
	return nil
}
