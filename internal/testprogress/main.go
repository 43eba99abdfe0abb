// Command testprogress shows the progress of a test run: it reads the
// events of go test -json on its standard input and prints a line as each
// package ends (in the order they end, where go test's own summary waits
// for the packages before it), a line for each test that took 5 s or more,
// the output of every failed test and build, and at the end the reasons
// tests were skipped, counted. It exits with status 1 when a test, a
// package or a build failed, or when the input held no package at all.
//
//	go test -race -count=1 -json ./... | go run ./internal/testprogress
//
// The README's test command and .ci/run use it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Stdin, os.Stdout, modulePath("go.mod")))
}

// slow is the duration from which a passing test gets a line of its own.
const slow = 5 * time.Second

// maxKept bounds the output kept per test and per package (the end of it
// is kept), so that a chatty test cannot grow memory without bound.
const maxKept = 64 << 10

// event is one line of go test -json (cmd/test2json), or of the build
// output go test -json reports since Go 1.24.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64 // seconds
	Output     string
}

// pkgState is what is known of one package while its tests run.
type pkgState struct {
	passed, failed, skipped int
	out                     map[string]*strings.Builder // by test ("" for the package)
}

// run reads events from r and writes the progress to w; it returns the
// exit status. module is stripped from package paths.
func run(r io.Reader, w io.Writer, module string) int {
	pkgs := map[string]*pkgState{}
	builds := map[string]*strings.Builder{}
	skips := map[string]int{}
	var okPkgs, failPkgs, total int
	var nPass, nFail, nSkip int // top-level tests
	failed := false
	short := func(p string) string {
		if p == module {
			return p[strings.LastIndex(p, "/")+1:]
		}
		return strings.TrimPrefix(p, module+"/")
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line) // not an event: go's own message
			continue
		}
		switch e.Action {
		case "build-output":
			b := builds[e.ImportPath]
			if b == nil {
				b = &strings.Builder{}
				builds[e.ImportPath] = b
			}
			keep(b, e.Output)
			continue
		case "build-fail":
			failed = true
			fmt.Fprintf(w, "FAIL  %s [build failed]\n", short(e.ImportPath))
			if b := builds[e.ImportPath]; b != nil {
				fmt.Fprint(w, indent(b.String()))
			}
			continue
		}
		if e.Package == "" {
			continue
		}
		ps := pkgs[e.Package]
		if ps == nil {
			ps = &pkgState{out: map[string]*strings.Builder{}}
			pkgs[e.Package] = ps
		}
		top := e.Test != "" && !strings.Contains(e.Test, "/")
		switch e.Action {
		case "output":
			b := ps.out[e.Test]
			if b == nil {
				b = &strings.Builder{}
				ps.out[e.Test] = b
			}
			keep(b, e.Output)
		case "pass":
			if e.Test == "" {
				okPkgs++
				total++
				fmt.Fprintf(w, "ok    %-28s %7s  %s\n", short(e.Package), secs(e.Elapsed), counts(ps))
				delete(pkgs, e.Package)
				continue
			}
			if top {
				ps.passed++
				nPass++
				if d := time.Duration(e.Elapsed * float64(time.Second)); d >= slow {
					fmt.Fprintf(w, "      %s %s passed (%s)\n", short(e.Package), e.Test, secs(e.Elapsed))
				}
			}
			delete(ps.out, e.Test)
		case "skip":
			if e.Test == "" {
				total++
				fmt.Fprintf(w, "?     %-28s [no test files]\n", short(e.Package))
				delete(pkgs, e.Package)
				continue
			}
			if top {
				ps.skipped++
				nSkip++
				skips[skipReason(ps.out[e.Test])]++
			}
			delete(ps.out, e.Test)
		case "fail":
			failed = true
			if e.Test == "" {
				failPkgs++
				total++
				fmt.Fprintf(w, "FAIL  %-28s %7s  %s\n", short(e.Package), secs(e.Elapsed), counts(ps))
				if b := ps.out[""]; b != nil {
					fmt.Fprint(w, indent(b.String()))
				}
				delete(pkgs, e.Package)
				continue
			}
			if top {
				ps.failed++
				nFail++
			}
			fmt.Fprintf(w, "--- FAIL %s %s (%s)\n", short(e.Package), e.Test, secs(e.Elapsed))
			if b := ps.out[e.Test]; b != nil {
				fmt.Fprint(w, indent(b.String()))
			}
			delete(ps.out, e.Test)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testprogress: reading the events: %v\n", err)
		failed = true
	}
	if len(skips) > 0 {
		fmt.Fprintln(w, "skipped tests, by reason:")
		reasons := make([]string, 0, len(skips))
		for r := range skips {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			if skips[reasons[i]] != skips[reasons[j]] {
				return skips[reasons[i]] > skips[reasons[j]]
			}
			return reasons[i] < reasons[j]
		})
		for _, r := range reasons {
			fmt.Fprintf(w, "  %4d  %s\n", skips[r], r)
		}
	}
	if total > 0 {
		// The plain closing line a CI reads: top-level tests only.
		fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", nPass, nFail, nSkip)
	}
	switch {
	case total == 0:
		fmt.Fprintln(w, "testprogress: no test results on the input (pipe go test -json into it)")
		return 1
	case failed:
		fmt.Fprintf(w, "FAIL: %d of %d packages failed\n", max(failPkgs, 1), total)
		return 1
	}
	fmt.Fprintf(w, "ok: %d packages\n", okPkgs)
	return 0
}

// keep appends s to b, keeping at most the last maxKept bytes.
func keep(b *strings.Builder, s string) {
	if b.Len()+len(s) > maxKept {
		all := b.String() + s
		b.Reset()
		b.WriteString(all[len(all)-maxKept:])
		return
	}
	b.WriteString(s)
}

// counts says how many of a package's tests passed, failed and skipped.
func counts(ps *pkgState) string {
	s := fmt.Sprintf("%d passed", ps.passed)
	if ps.failed > 0 {
		s += fmt.Sprintf(", %d failed", ps.failed)
	}
	if ps.skipped > 0 {
		s += fmt.Sprintf(", %d skipped", ps.skipped)
	}
	return s
}

// secs formats seconds as go test does ("4.75s").
func secs(s float64) string { return fmt.Sprintf("%.2fs", s) }

// indent indents s by four spaces, as go test shows a test's output.
func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// location is the "file_test.go:12: " a test's log line starts with.
var location = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason returns the message a skipped test gave: its output without
// the === and --- lines and their locations; "(no reason given)" if none.
func skipReason(b *strings.Builder) string {
	if b == nil {
		return "(no reason given)"
	}
	var msg []string
	for _, l := range strings.Split(b.String(), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if m := strings.TrimSpace(location.ReplaceAllString(l, "")); m != "" {
			msg = append(msg, m)
		}
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// modulePath returns the module path in the go.mod file at p, "" if none.
func modulePath(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
