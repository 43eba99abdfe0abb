//go:build !unix

package main

// cpuMicros is 0 where getrusage is missing: client CPU is not reported.
func cpuMicros() int64 { return 0 }
