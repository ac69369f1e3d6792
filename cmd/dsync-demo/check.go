package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/tests/torture"
)

// A check worker is this program started again by dsync-demo check, with
// proc.Env set: it runs the worker and exits before main.
func init() { proc.RunIfWorker() }

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flagSet("dsync-demo check", stdout, stderr, "usage: dsync-demo check [flags]\n\n"+
		"Soaks a backend with worker processes under faults and checks safety from the recorded history and a\n"+
		"fenced store. Without --url it starts single Redis, Redlock (5 masters) and a 3-member etcd and checks each.\n"+
		"Writes an HTML report; --json prints the summary as one JSON object on stdout (progress goes to stderr).")
	urlOf := urlFlag(fs, "backend URL (default: start single Redis, Redlock and etcd servers and check each)")
	backendList := fs.String("backend", "redis,redlock,etcd", "without --url: the embedded backends to check, in turn")
	duration := fs.Duration("duration", 5*time.Minute, "length of the soak, per backend")
	prim := fs.String("primitive", torture.PrimLock, "what the workers use: lock, sem or elect")
	faultList := fs.String("faults", "safe", `faults to inject, comma-separated, one at a time: `+strings.Join(torture.FaultKinds, ", ")+
		`; "safe" for those the backend promises to survive, "none" for none`)
	workers := fs.Int("workers", 4, "worker processes")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL of the workers")
	size := fs.Int("size", 2, "semaphore size (--primitive sem)")
	key := fs.String("key", "", "lock, semaphore or election name (default: dsync-check/ and a random suffix)")
	storeAddr := fs.String("store", "", "the fenced store: host:port of a Redis, written through fence's Redis guard; etcd://host:port,... through etcdfence; "+
		"a postgres:// URL or sqlite:PATH of a file, through fence's SQL guard, which creates its tables there (default: start a redis-server)")
	reportPath := fs.String("report", "dsync-check.html", "HTML report to write")
	asJSON := fs.Bool("json", false, "print the summary as JSON on stdout; progress and reports go to stderr")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	url := urlOf()
	out := stdout // the text output; stderr when stdout carries the JSON summary
	if *asJSON {
		out = stderr
	}
	switch {
	case *prim != torture.PrimLock && *prim != torture.PrimSem && *prim != torture.PrimElect:
		fmt.Fprintf(stderr, "dsync-demo check: --primitive %q: want lock, sem or elect\n", *prim)
		return exitUsage
	case *workers < 1 || *size < 1:
		fmt.Fprintln(stderr, "dsync-demo check: --workers and --size must be at least 1")
		return exitUsage
	case *duration <= 0 || *ttl <= 0:
		fmt.Fprintln(stderr, "dsync-demo check: --duration and --ttl must be positive")
		return exitUsage
	}
	if *key == "" {
		*key = "dsync-check/" + strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "dsync-demo check: %s\n", oneLine(err))
		return exitFail
	}

	var targets []torture.Target
	if url != "" {
		b, code := openBackend(ctx, url, stderr)
		if code != exitOK {
			return code
		}
		name := b.String() // the URL, its password redacted
		b.Close()
		targets = []torture.Target{{Name: name, URL: url}}
	} else {
		names := strings.Split(*backendList, ",")
		for _, n := range names {
			if !slices.Contains([]string{"redis", "redlock", "etcd"}, n) {
				fmt.Fprintf(stderr, "dsync-demo check: --backend %q: want redis, redlock or etcd\n", n)
				return exitUsage
			}
		}
		_, noRedis := lookupRedis()
		e, cleanup, code := startEmbedded(ctx, out, stderr, noRedis == nil)
		defer cleanup()
		if code != exitOK {
			return code
		}
		if e.single == nil {
			fmt.Fprintln(stderr, "dsync-demo check: the embedded backends need redis-server (sudo apt-get install -y redis-server), or give --url")
			return exitUsage
		}
		for _, n := range names {
			switch n {
			case "redis":
				targets = append(targets, torture.Target{Name: "single Redis", URL: e.single.URL(), Redis: []*redistest.Server{e.single}})
			case "redlock":
				targets = append(targets, torture.Target{Name: "Redlock (5 masters)", URL: e.redlockURL(), Redis: e.masters})
			case "etcd":
				targets = append(targets, torture.Target{Name: "etcd (3 members)", URL: e.cluster.URL(), Cluster: e.cluster})
			}
		}
	}
	faults := make([][]string, len(targets))
	for i, t := range targets {
		if faults[i], err = torture.ParseFaults(t, *faultList); err != nil {
			fmt.Fprintf(stderr, "dsync-demo check: --faults: %s (%s)\n", oneLine(err), t.Name)
			return exitUsage
		}
	}

	addr := *storeAddr
	if addr == "" {
		s, err := redistest.StartServer(ctx, nil)
		if err != nil {
			fmt.Fprintf(stderr, "dsync-demo check: starting a redis-server for the fenced store (or give --store host:port): %s\n", oneLine(err))
			return exitFail
		}
		defer s.Close()
		addr = s.Addr()
	}
	store, err := torture.OpenStore(addr)
	if err != nil {
		fmt.Fprintf(stderr, "dsync-demo check: the fenced store: %s\n", oneLine(err))
		return exitFail
	}
	defer store.Close()
	if err := store.Setup(ctx); err != nil {
		fmt.Fprintf(stderr, "dsync-demo check: the fenced store: %s\n", oneLine(err))
		return exitFail
	}
	fmt.Fprintf(out, "fenced store: %s, through its fence guard\n", store)

	spawn := func(role, url string, args map[string]string) (*proc.Worker, error) {
		return proc.Spawn(exe, role, url, args)
	}
	every := min(max(*duration/10, time.Second), 5*time.Second)
	var reports []*torture.Report
	status := exitOK
	for i, t := range targets {
		fmt.Fprintf(out, "\n== %s: %s, %d workers, ttl %v, %v; faults: %s ==\n", t.Name, *prim, *workers, *ttl, *duration, orNone(faults[i]))
		rep, err := torture.Soak(ctx, torture.SoakConfig{
			Target: t, Spawn: spawn, Store: store, StoreAddr: addr,
			Prim: *prim, Key: fmt.Sprintf("%s/%d", *key, i), Workers: *workers, Size: *size, TTL: *ttl,
			Duration: *duration, Faults: faults[i], Every: every,
			Progress: func(s torture.Summary) { fmt.Fprintln(out, s) },
		})
		if err != nil {
			fmt.Fprintf(stderr, "dsync-demo check: %s: %s\n", t.Name, oneLine(err))
			return exitFail
		}
		rep.Title = fmt.Sprintf("%s: %s, %d workers, ttl %v", t.Name, *prim, *workers, *ttl)
		rep.WriteText(out)
		reports = append(reports, rep)
		if !rep.OK() {
			status = exitFail
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := writeReport(*reportPath, reports); err != nil {
		fmt.Fprintf(stderr, "dsync-demo check: writing the report: %s\n", oneLine(err))
		return exitFail
	}
	verdict := "every check passed"
	if status != exitOK {
		verdict = "VIOLATIONS found"
	}
	fmt.Fprintf(out, "\n%s; report: %s\n", verdict, *reportPath)
	if *asJSON {
		writeSummaryJSON(stdout, reports, *reportPath)
	}
	return status
}

func writeReport(path string, reports []*torture.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := torture.WriteHTML(f, "dsync-demo check", reports...); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}
