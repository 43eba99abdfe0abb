//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// Workers still exit when their stdin (a pipe from the parent) closes.
func dieWithParent(*exec.Cmd) {}
