//go:build !linux

package redistest

import "os/exec"

// orphanGuard does nothing here: only Linux has a parent-death signal.
func orphanGuard(*exec.Cmd) {}
