package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// groupAlive reports whether a live process of the group pgid is left. A
// zombie does not count: an orphan is reaped by init, which in a container
// may never happen.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true // no /proc: trust kill
	}
	for _, path := range stats {
		state, pgrp, ok := procState(path)
		if ok && pgrp == pgid && state != 'Z' {
			return true
		}
	}
	return false
}

// procState reads the state and process group of a /proc/PID/stat file.
func procState(path string) (state byte, pgrp int, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(string(f[2]))
	return f[0][0], pgrp, err == nil
}

// waitGroupGone waits, up to d, until no live process of the group pgid is
// left (SIGKILL takes a moment to end a process).
func waitGroupGone(pgid int, d time.Duration) {
	for end := time.Now().Add(d); groupAlive(pgid) && time.Now().Before(end); {
		time.Sleep(groupPoll)
	}
}
