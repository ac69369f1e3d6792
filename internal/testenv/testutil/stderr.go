//go:build unix

package testutil

import (
	"bytes"
	"io"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// stderrMu serializes CaptureStderr: file descriptor 2 is the process's.
var stderrMu sync.Mutex

// CaptureStderr runs fn with the process's file descriptor 2 sent to a
// pipe, and returns what was written to it meanwhile, by anyone: loggers
// made at init hold os.Stderr's descriptor, not the variable, so swapping
// the variable would miss them. Call it from a test that is not parallel,
// or other tests' output lands in the capture.
func CaptureStderr(t testing.TB, fn func()) string {
	t.Helper()
	stderrMu.Lock()
	defer stderrMu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("CaptureStderr: %v", err)
	}
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatalf("CaptureStderr: dup: %v", err)
	}
	if err := unix.Dup2(int(w.Fd()), 2); err != nil {
		t.Fatalf("CaptureStderr: dup2: %v", err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&buf, r)
	}()
	func() {
		defer func() { // even if fn fails the test
			restoreErr := unix.Dup2(saved, 2)
			_ = unix.Close(saved)
			_ = w.Close()
			<-done
			_ = r.Close()
			if restoreErr != nil {
				t.Fatalf("CaptureStderr: restoring stderr: %v", restoreErr)
			}
		}()
		fn()
	}()
	return buf.String()
}
