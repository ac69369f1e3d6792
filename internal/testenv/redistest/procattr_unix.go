//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr makes redis-server lead its own process group, so that a
// terminal's Ctrl-C reaches only the test binary, whose cleanups close the
// servers. Only Linux can also tie its life to the test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
