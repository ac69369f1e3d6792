//go:build unix

package redistest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)

// signalGroup sends sig to the process group that p leads (see
// sysProcAttr), which holds the children redis-server forks to rewrite
// its AOF.
func signalGroup(p *os.Process, sig os.Signal) error {
	err := syscall.Kill(-p.Pid, sig.(syscall.Signal))
	if errors.Is(err, syscall.ESRCH) {
		return nil // exited; its waiter reaps it
	}
	if err != nil {
		return fmt.Errorf("redistest: %v to process group %d: %w", sig, p.Pid, err)
	}
	return nil
}
