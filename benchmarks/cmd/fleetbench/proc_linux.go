package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL the worker when the parent dies,
// however it dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
