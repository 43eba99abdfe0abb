package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestStopAndStartAgain: the server answers, stops answering after Stop,
// and answers again on the same address after Start.
func TestStopAndStartAgain(t *testing.T) {
	s := Start(t)
	addr := s.Addr()
	if err := ping(addr); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := ping(addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // stopping twice is harmless
	s.Start()
	if s.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, s.Addr())
	}
	if err := ping(addr); err != nil {
		t.Fatalf("after Start: %v", err)
	}
	s.Restart()
	if err := ping(addr); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

// outcome runs f with a TB that records Skip and Fatal instead of ending
// the real test.
func outcome(t *testing.T, f func(testing.TB)) (skipped, failed string) {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.skipped, r.failed
}

type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Skip(args ...any)          { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recordingTB) Fatal(args ...any)         { r.failed = fmt.Sprint(args...); runtime.Goexit() }
func (r *recordingTB) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...); runtime.Goexit() }

// TestNoBinary: without redis-server on PATH, Start skips with the install
// command, except under CI, where it fails.
func TestNoBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := exec.LookPath("redis-server"); err == nil {
		t.Fatal("redis-server still found")
	}
	t.Setenv("CI", "")
	skipped, failed := outcome(t, func(tb testing.TB) { Start(tb) })
	if failed != "" || !strings.Contains(skipped, "apt-get install redis-server") {
		t.Fatalf("without CI: skipped %q, failed %q; want a skip naming apt-get install redis-server", skipped, failed)
	}
	t.Setenv("CI", "true")
	skipped, failed = outcome(t, func(tb testing.TB) { Start(tb) })
	if skipped != "" || !strings.Contains(failed, "apt-get install redis-server") {
		t.Fatalf("under CI: skipped %q, failed %q; want a failure", skipped, failed)
	}
}

// Launch starts a server for a program: it answers, and Stop ends it and
// removes its directory.
func TestLaunch(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no redis-server under CI")
		}
		t.Skip("no redis-server on PATH")
	}
	s, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("launched server does not answer: %v", err)
	}
	s.Stop()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("server still answers after Stop")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left behind (%v)", s.dir, err)
	}
}
