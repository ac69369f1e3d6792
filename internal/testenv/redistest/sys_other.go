//go:build !unix

package redistest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Without Unix signals only Kill and Close work; Stop, Pause and Resume
// return errors.ErrUnsupported.
var (
	sigTerm os.Signal = unixSignal("SIGTERM")
	sigKill           = os.Kill
	sigStop os.Signal = unixSignal("SIGSTOP")
	sigCont os.Signal = unixSignal("SIGCONT")
)

type unixSignal string

func (s unixSignal) String() string { return string(s) }
func (unixSignal) Signal()          {}

func signalGroup(p *os.Process, sig os.Signal) error {
	if sig != os.Kill {
		return fmt.Errorf("redistest: %v: %w", sig, errors.ErrUnsupported)
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

func sysProcAttr() *syscall.SysProcAttr { return nil }
