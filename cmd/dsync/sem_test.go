package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/semaphore"
)

func TestSemLimitsConcurrentCommands(t *testing.T) {
	// Replayed in order, the commands' stamps show at most --size at once.
	stamps := filepath.Join(t.TempDir(), "stamps")
	script := stampedCommand(stamps, "0.05")
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
	most, sections, err := mostAtOnce(stamps)
	if err != nil {
		t.Fatal(err)
	}
	if sections != len(codes) || most > 2 {
		t.Fatalf("%d commands ran, at most %d at once; want %d and at most 2", sections, most, len(codes))
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
		{[]string{"sem", "jobs", "--size", "2", "--url", "memory://x", "--try", "--timeout", "1s"}, "usage: dsync sem"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dsync %v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}
