package torture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// Fault is something the nemesis does to the system: inject it, and later
// heal it. Inject returns what it hit ("node 2", "member 1 (leader)"); a
// Fault without Heal is instantaneous (a kill, a script flush).
type Fault struct {
	Kind   string // pause-client, kill-client, kill-node, restart-node, pause-node, latency, blackhole, refuse, stop-member, kill-member, script-flush...
	Inject func(ctx context.Context) (string, error)
	Heal   func(ctx context.Context) error
}

// Span is one injected fault on the harness's clock.
type Span struct {
	Kind     string
	Target   string
	Began    time.Duration // CLOCK_MONOTONIC when Inject was called
	Injected time.Duration // once Inject returned
	Healed   time.Duration // once Heal returned; Injected for an instantaneous fault; 0 while in effect
	Err      error         // of Inject or Heal
}

// Name is "kind target".
func (s Span) Name() string { return strings.TrimSpace(s.Kind + " " + s.Target) }

// Injection is a fault in effect, to heal with Harness.Heal.
type Injection struct {
	mu   sync.Mutex // protects span and heal
	span Span
	heal func(ctx context.Context) error // nil once healing began
}

// Span returns the fault's span as recorded so far.
func (in *Injection) Span() Span {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.span
}

// Inject injects f and records it. The span is recorded even if Inject
// fails, with its error.
func (h *Harness) Inject(ctx context.Context, f Fault) (*Injection, error) {
	began := proc.Monotonic()
	target, err := f.Inject(ctx)
	in := &Injection{span: Span{Kind: f.Kind, Target: target, Began: began, Injected: proc.Monotonic(), Err: err}, heal: f.Heal}
	if f.Heal == nil || err != nil {
		in.span.Healed = in.span.Injected
		in.heal = nil
	}
	h.mu.Lock()
	h.spans = append(h.spans, in)
	h.mu.Unlock()
	if err != nil {
		return in, fmt.Errorf("torture: injecting %s: %w", in.span.Name(), err)
	}
	return in, nil
}

// Heal heals the fault of in, once; healing a healed fault does nothing.
func (h *Harness) Heal(ctx context.Context, in *Injection) error {
	in.mu.Lock()
	heal := in.heal
	in.heal = nil
	in.mu.Unlock()
	if heal == nil {
		return nil
	}
	err := heal(ctx)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.span.Healed = proc.Monotonic()
	if err != nil {
		in.span.Err = err
		return fmt.Errorf("torture: healing %s: %w", in.span.Name(), err)
	}
	return nil
}

// PauseClient stops worker w with SIGSTOP; healing continues it.
func PauseClient(w *Worker) Fault {
	return Fault{
		Kind:   "pause-client",
		Inject: func(context.Context) (string, error) { return w.ID(), w.Pause() },
		Heal:   func(context.Context) error { return w.Resume() },
	}
}

// KillClient kills worker w with SIGKILL (instantaneous).
func KillClient(w *Worker) Fault {
	return Fault{
		Kind:   "kill-client",
		Inject: func(context.Context) (string, error) { w.Kill(); return w.ID(), nil },
	}
}

// KillNode kills redis-server s with SIGKILL; healing restarts it, with
// its data if it was started persistent, empty otherwise.
func KillNode(name string, s *redistest.Server) Fault {
	return Fault{
		Kind:   "kill-node",
		Inject: func(context.Context) (string, error) { return name, s.Kill() },
		Heal:   func(ctx context.Context) error { return s.Restart(ctx) },
	}
}

// RestartNode kills and restarts redis-server s at once (instantaneous):
// a crash and a restart, without persistence unless it was started
// persistent.
func RestartNode(name string, s *redistest.Server) Fault {
	return Fault{
		Kind:   "restart-node",
		Inject: func(ctx context.Context) (string, error) { return name, s.Restart(ctx) },
	}
}

// PauseNode stops redis-server s with SIGSTOP; healing continues it.
func PauseNode(name string, s *redistest.Server) Fault {
	return Fault{
		Kind:   "pause-node",
		Inject: func(context.Context) (string, error) { return name, s.Pause() },
		Heal:   func(context.Context) error { return s.Resume() },
	}
}

// Latency delays the replies through proxies by d; healing removes it.
func Latency(name string, d time.Duration, ps ...*faultproxy.Proxy) Fault {
	return proxyFault(fmt.Sprintf("latency-%v", d), name, func(p *faultproxy.Proxy) error { return p.Latency(d) }, ps)
}

// Blackhole drops every byte sent through proxies; healing removes it.
func Blackhole(name string, ps ...*faultproxy.Proxy) Fault {
	return proxyFault("blackhole", name, (*faultproxy.Proxy).Blackhole, ps)
}

// Refuse cuts proxies' connections, open and new (see faultproxy.Refuse);
// healing lets them through again.
func Refuse(name string, ps ...*faultproxy.Proxy) Fault {
	return proxyFault("refuse", name, (*faultproxy.Proxy).Refuse, ps)
}

func proxyFault(kind, name string, inject func(*faultproxy.Proxy) error, ps []*faultproxy.Proxy) Fault {
	return Fault{
		Kind: kind,
		Inject: func(context.Context) (string, error) {
			var errs []error
			for _, p := range ps {
				errs = append(errs, inject(p))
			}
			return name, errors.Join(errs...)
		},
		Heal: func(context.Context) error {
			var errs []error
			for _, p := range ps {
				errs = append(errs, p.Heal())
			}
			return errors.Join(errs...)
		},
	}
}

// Member indexes that StopMember resolves when the fault is injected.
const (
	LeaderMember   = -1 // the member that leads the cluster
	FollowerMember = -2 // a member that does not
)

// StopMember stops etcd member i of c (or LeaderMember, FollowerMember),
// gracefully or, with kill, abruptly; healing restarts it.
func StopMember(c *etcdtest.Cluster, i int, kill bool) Fault {
	kind := "stop-member"
	if kill {
		kind = "kill-member"
	}
	var hit int
	return Fault{
		Kind: kind,
		Inject: func(ctx context.Context) (string, error) {
			hit = i
			what := fmt.Sprintf("member %d", i)
			if i < 0 {
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				l, err := c.Leader(lctx)
				if err != nil {
					return "leader", err
				}
				hit, what = l, fmt.Sprintf("member %d (leader)", l)
				if i == FollowerMember {
					hit = (l + 1) % c.Size()
					what = fmt.Sprintf("member %d (a follower)", hit)
				}
			}
			if kill {
				c.Kill(hit)
			} else {
				c.Stop(hit)
			}
			return what, nil
		},
		Heal: func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return c.Restart(rctx, hit)
		},
	}
}

// ScriptFlush empties the script cache of every Redis server at addrs
// (instantaneous): the clients' EVALSHA calls fail with NOSCRIPT until they
// load their scripts again.
func ScriptFlush(addrs ...string) Fault {
	return Fault{
		Kind: "script-flush",
		Inject: func(ctx context.Context) (string, error) {
			var errs []error
			for _, a := range addrs {
				c := goredis.NewClient(&goredis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
				fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				errs = append(errs, c.ScriptFlush(fctx).Err(), c.Close())
				cancel()
			}
			return strings.Join(addrs, ","), errors.Join(errs...)
		},
	}
}

// Group injects several faults as one (a majority of nodes killed, a
// client cut off from every node) and heals them together.
func Group(kind string, fs ...Fault) Fault {
	return Fault{
		Kind: kind,
		Inject: func(ctx context.Context) (string, error) {
			var (
				names []string
				errs  []error
			)
			for _, f := range fs {
				n, err := f.Inject(ctx)
				names, errs = append(names, n), append(errs, err)
			}
			return strings.Join(names, "+"), errors.Join(errs...)
		},
		Heal: func(ctx context.Context) error {
			var errs []error
			for _, f := range fs {
				if f.Heal != nil {
					errs = append(errs, f.Heal(ctx))
				}
			}
			return errors.Join(errs...)
		},
	}
}
