//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: a worker stops when its stdin closes.
func dieWithParent(*exec.Cmd) {}
