package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// e2e is what the end-to-end subtests share: the built binary and a real
// redis-server.
type e2e struct {
	bin    string
	url    string
	client *goredis.Client
}

// line is one line a process wrote, and when the test read it.
type line struct {
	text string
	at   time.Time
}

// process is a dsync process whose stdin the test holds and whose output
// lines it reads as they come.
type process struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr chan line // closed at EOF
	wg             sync.WaitGroup
	mu             sync.Mutex // protects errText
	errText        strings.Builder
}

// start starts dsync with args and env added to the test's environment;
// the test's cleanup kills it if it still runs.
func (e *e2e) start(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(e.bin, args...), stdout: make(chan line, 100), stderr: make(chan line, 100)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.WaitDelay = 5 * time.Second
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.wg.Go(func() { p.scan(out, p.stdout) })
	p.wg.Go(func() { p.scan(errOut, p.stderr) })
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			p.wg.Wait()
			_ = p.cmd.Wait()
		}
	})
	return p
}

func (p *process) scan(r io.Reader, lines chan<- line) {
	defer close(lines)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if lines == p.stderr {
			p.mu.Lock()
			p.errText.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		lines <- line{sc.Text(), time.Now()}
	}
}

// stderrText is what the process wrote on stderr so far.
func (p *process) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errText.String()
}

// waitLine returns the first line of lines containing want, read within 30s.
func (p *process) waitLine(t *testing.T, lines <-chan line, want string) line {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("no line containing %q before EOF; stderr %q", want, p.stderrText())
			}
			if strings.Contains(l.text, want) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line containing %q within 30s; stderr %q", want, p.stderrText())
		}
	}
}

// wait waits up to 30s for the process to exit, its output read, and
// returns its status and when it exited.
func (p *process) wait(t *testing.T) (int, time.Time) {
	t.Helper()
	done := make(chan time.Time, 1)
	go func() { p.wg.Wait(); _ = p.cmd.Wait(); done <- time.Now() }()
	select {
	case at := <-done:
		return p.cmd.ProcessState.ExitCode(), at
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("dsync did not exit within 30s; stderr %q", p.stderrText())
		return -1, time.Time{}
	}
}

// readPID reads the process ID a command wrote to path, once it is there.
func readPID(t *testing.T, path string) int {
	t.Helper()
	waitFile(t, path)
	for deadline := time.Now().Add(10 * time.Second); ; {
		data, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no process ID: %q", path, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether the process pid has ended: it does not exist, or it
// is a zombie its new parent has not reaped yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
