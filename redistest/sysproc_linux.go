package redistest

import (
	"os/exec"
	"syscall"
)

// orphanGuard makes the kernel kill redis-server when the test binary dies
// without running its cleanups (a panic in another goroutine, a timeout).
func orphanGuard(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
