package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/semaphore"
)

func TestSemLimitsConcurrentCommands(t *testing.T) {
	// Each command appends its start and end times (date +%s%N, one clock)
	// to a file; replayed in order, at most --size may overlap.
	stamps := filepath.Join(t.TempDir(), "stamps")
	script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %q; sleep 0.05; echo "end $(date +%%s%%N)" >> %q`, stamps, stamps)
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = runCLI(t, "sem", "pool", "--size", "2", "--url", "memory://sem-limit", "--", "sh", "-c", script)
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Fatalf("run %d exited %d", i, c)
		}
	}
	f, err := os.Open(stamps)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type stamp struct {
		what string
		at   int64
	}
	var events []stamp
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var s stamp
		if _, err := fmt.Sscan(sc.Text(), &s.what, &s.at); err != nil {
			t.Fatalf("stamp %q: %v", sc.Text(), err)
		}
		events = append(events, s)
	}
	slices.SortFunc(events, func(a, b stamp) int { return cmp.Compare(a.at, b.at) })
	running, most := 0, 0
	for _, e := range events {
		if e.what == "start" {
			running++
			most = max(most, running)
		} else {
			running--
		}
	}
	if len(events) != 2*len(codes) || most > 2 {
		t.Fatalf("%d stamps, at most %d commands at once; want %d stamps and at most 2", len(events), most, 2*len(codes))
	}
	t.Logf("at most %d commands ran at once (size 2)", most)
}

func TestSemTryOnFullSemaphore(t *testing.T) {
	const url = "memory://sem-full"
	b, err := dsync.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, _ := semaphore.New(b, "jobs", 1, nil)
	p, err := s.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(context.Background())
	code, _, errOut := runCLI(t, "sem", "jobs", "--size", "1", "--url", url, "--try", "--", "true")
	if code != exitNotAcquired || !strings.Contains(errOut, "held by another owner") {
		t.Errorf("--try on a full semaphore: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "sem", "jobs", "--size", "3", "--url", url, "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "3 disagrees with the size 1") {
		t.Errorf("a size that disagrees with the holders': exit %d, stderr %q", code, errOut)
	}
}

func TestSemUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sem", "jobs", "--url", "memory://x", "--", "true"}, "--size must be given"},
		{[]string{"sem", "jobs", "--size", "-2", "--url", "memory://x", "--", "true"}, "--size must be given, and positive"},
		{[]string{"sem", "jobs", "--size", "two", "--url", "memory://x", "--", "true"}, "invalid value"},
		{[]string{"sem", "jobs", "--size", "2", "--url", "memory://x"}, "usage: dsync sem"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dsync %v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}
