package redistest

import "syscall"

// sysProcAttr makes redis-server lead its own process group, so that a
// terminal's Ctrl-C reaches only the test binary, whose cleanups close the
// servers; and has the kernel kill it when the thread that started it
// exits, so that a test binary that crashes takes its servers down. Go
// ends a thread only when a goroutine exits while locked to it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
