package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/dsync-dev/dsync"
)

// forwarded are the signals dsync passes on to CMD's process group;
// terminating says which of them also start the --grace clock.
var (
	forwarded   = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
	terminating = map[os.Signal]bool{syscall.SIGINT: true, syscall.SIGTERM: true, syscall.SIGHUP: true, syscall.SIGQUIT: true}
)

// groupPoll is how often a stopping group is checked for processes left:
// the kernel has no event for a process group becoming empty.
const groupPoll = 20 * time.Millisecond

// ending is a hold that ends: a lease, or a term of leadership.
type ending interface {
	Done() <-chan struct{}
	Err() error
}

// runUnder runs argv in a process group of its own, with env added to its
// environment, while hold lasts, and returns dsync's exit status.
//
// When the hold is lost, or dsync gets a terminating signal (which it
// forwards), the group gets SIGTERM (or that signal) and, if any process of
// it is left grace later, SIGKILL; runUnder returns once CMD has exited and
// the group is empty, or just after the SIGKILL, without waiting for
// whoever else holds CMD's output. It returns exitLost after a loss, CMD's
// own status otherwise.
func runUnder(hold ending, what string, env, argv []string, grace time.Duration, r reporter, io stdio) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = io.in, io.out, io.err
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// When the output is not a file, exec copies it from a pipe; processes
	// left in the group (or escaped from it) may hold that pipe open.
	cmd.WaitDelay = grace
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		r.notice("%v", err)
		return exitNoCommand
	}
	pgid := cmd.Process.Pid // Setpgid: the group is named after CMD
	r.event("started %s as process group %d", argv[0], pgid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // received from before every return

	var (
		lost, stopping, killed bool
		waitErr                error
		hasExited              bool
		kill                   <-chan time.Time
		poll                   <-chan time.Time
		holdDone               = hold.Done()
	)
	stop := func(s syscall.Signal) {
		_ = syscall.Kill(-pgid, s)
		if !stopping {
			stopping = true
			kill = time.After(grace)
		}
	}
	status := func() int {
		if lost {
			return exitLost
		}
		return exitStatus(waitErr)
	}
	for {
		select {
		case waitErr = <-exited:
			hasExited, exited = true, nil
			if killed {
				waitGroupGone(pgid, time.Second)
			}
			if !stopping || killed || !groupAlive(pgid) {
				return status()
			}
			poll = time.After(groupPoll)
		case <-poll:
			if !groupAlive(pgid) {
				return status()
			}
			poll = time.After(groupPoll)
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if terminating[s] {
				r.notice("got %v; sending it to process group %d, SIGKILL in %v if any of it is left", sig, pgid, grace)
				stop(sig)
			} else {
				_ = syscall.Kill(-pgid, sig)
			}
		case <-holdDone:
			holdDone = nil
			if errors.Is(hold.Err(), dsync.ErrLeaseLost) {
				lost = true
				r.notice("%s lost (%s); sending SIGTERM to process group %d, SIGKILL in %v if any of it is left", what, oneLine(hold.Err()), pgid, grace)
				stop(syscall.SIGTERM)
			}
		case <-kill:
			kill, killed = nil, true
			r.notice("grace period over; sending SIGKILL to process group %d", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if hasExited {
				waitGroupGone(pgid, time.Second)
				return status()
			}
		}
	}
}

// exitStatus maps CMD's end to dsync's exit status: its own status, or
// 128+signal when a signal ended it, as shells do.
func exitStatus(err error) int {
	if err == nil || errors.Is(err, exec.ErrWaitDelay) { // ErrWaitDelay: CMD succeeded, its output was cut off
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitNoCommand
}
