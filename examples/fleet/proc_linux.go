package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel send SIGKILL to the child when this process
// dies, however it dies (SIGKILL included), so that no redis-server and no
// worker outlives the run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
