// Command redistable measures BenchmarkRedis (benchmarks/redis_bench_test.go)
// on two versions of ratesem and prints issue 20's table: calls/s of every
// contender at each level (serial, g16, g64), with its ratio to
// go-redis/redis_rate's Allow measured in the same run, medians over k runs,
// and the round trips, client CPU, Redis calls and server time per call,
// and how busy the server's one thread was (srv-busy: server CPU seconds per
// second of the run).
//
// It builds one test binary per version (go test -c), then runs them
// alternately k times (base, head; then head, base; ...), each run
// `-test.bench 'Redis$' -test.count 1` with its own redis-server (the
// benchmark starts one; redis-server must be on PATH). A ratio is taken
// within one run (the contender's calls/s over redis_rate Allow's of the
// same binary invocation), then the median over the k runs is printed; so
// is the median of each metric.
//
// A version is a commit (extracted with git archive into a temporary
// directory) or the path of a ratesem source tree (used as it is, with its
// uncommitted changes). By default the harness of the head version
// (benchmarks/redis_bench_test.go and redisserver_test.go) replaces the
// base's in an extracted commit, so that both versions are measured by
// the same benchmark code, contenders included (-same-harness=false keeps
// each version's own).
//
// Run it from the benchmarks directory:
//
//	go run ./cmd/redistable -base 2c7720f -head .. -k 3
//
// One run of one binary takes about a minute with -benchtime 1s.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	base := flag.String("base", "2c7720f", "the base `version`: a commit, or the path of a source tree")
	head := flag.String("head", "..", "the head `version`: a commit, or the path of a source tree")
	k := flag.Int("k", 3, "runs of each binary (medians over `k`)")
	benchtime := flag.String("benchtime", "1s", "-test.benchtime of each run")
	bench := flag.String("bench", "Redis$", "-test.bench of each run")
	sameHarness := flag.Bool("same-harness", true, "measure an extracted commit with the head's Redis benchmark files")
	keep := flag.String("raw", "", "write each run's raw output to this `directory`")
	flag.Parse()
	if *k < 1 {
		fail(fmt.Errorf("-k %d: want ≥ 1", *k))
	}

	tmp, err := os.MkdirTemp("", "redistable-")
	if err != nil {
		fail(err)
	}
	tmpDir = tmp
	defer os.RemoveAll(tmp)

	headTree, headLabel, err := tree(*head, filepath.Join(tmp, "head"))
	if err != nil {
		fail(err)
	}
	baseTree, baseLabel, err := tree(*base, filepath.Join(tmp, "base"))
	if err != nil {
		fail(err)
	}
	harness := "each version's own BenchmarkRedis"
	if *sameHarness && strings.HasPrefix(baseTree, tmp) {
		harness = "the head's BenchmarkRedis (redis_bench_test.go, redisserver_test.go) on both versions"
		for _, f := range []string{"redis_bench_test.go", "redisserver_test.go"} {
			if err := copyFile(filepath.Join(headTree, "benchmarks", f), filepath.Join(baseTree, "benchmarks", f)); err != nil {
				fail(err)
			}
		}
	}
	sides := []*side{{label: baseLabel, tree: baseTree}, {label: headLabel, tree: headTree}}
	for i, s := range sides {
		s.bin = filepath.Join(tmp, fmt.Sprintf("bench%d.test", i))
		cmd := exec.Command("go", "test", "-c", "-o", s.bin, ".")
		cmd.Dir = filepath.Join(s.tree, "benchmarks")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("go test -c in %s: %w", cmd.Dir, err))
		}
	}
	if *keep != "" {
		if err := os.MkdirAll(*keep, 0o755); err != nil {
			fail(err)
		}
	}

	start := time.Now()
	for run := range *k {
		order := sides
		if run%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, s := range order {
			fmt.Fprintf(os.Stderr, "run %d/%d: %s\n", run+1, *k, s.label)
			cmd := exec.Command(s.bin, "-test.run", "XXX", "-test.bench", *bench,
				"-test.benchtime", *benchtime, "-test.count", "1")
			cmd.Dir = filepath.Join(s.tree, "benchmarks")
			var out bytes.Buffer
			cmd.Stdout = &out
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				os.Stderr.Write(out.Bytes())
				fail(fmt.Errorf("%s: %w", s.label, err))
			}
			if *keep != "" {
				name := filepath.Join(*keep, fmt.Sprintf("%s-run%d.txt", safe(s.label), run+1))
				if err := os.WriteFile(name, out.Bytes(), 0o644); err != nil {
					fail(err)
				}
			}
			r, err := parse(&out)
			if err != nil {
				fail(fmt.Errorf("%s: %w", s.label, err))
			}
			s.runs = append(s.runs, r)
		}
	}

	host, _ := os.Hostname()
	fmt.Printf("%s, %s/%s, %d CPUs, host %s; k = %d runs of each binary, alternated, -bench '%s' -benchtime %s; %s in all; harness: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), host,
		*k, *bench, *benchtime, time.Since(start).Round(time.Second), harness)
	for _, s := range sides {
		s.print(os.Stdout)
	}
	printCompare(os.Stdout, sides[0], sides[1])
}

// reference is the contender every ratio is taken against.
const reference = "redis_rate-Allow"

var levels = []string{"serial", "g16", "g64"}

type side struct {
	label, tree, bin string
	runs             []result
}

// result is one run's metrics: level → contender → unit → value, and the
// contenders in the order the run reported them.
type result struct {
	m     map[string]map[string]map[string]float64
	names []string
}

var benchLine = regexp.MustCompile(`^BenchmarkRedis/([^/\s]+)/(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parse reads the lines of `go test -bench` output of BenchmarkRedis.
func parse(r io.Reader) (result, error) {
	res := result{m: map[string]map[string]map[string]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		g := benchLine.FindStringSubmatch(sc.Text())
		if g == nil {
			continue
		}
		level, name := g[1], g[2]
		f := strings.Fields(g[3])
		vals := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return res, fmt.Errorf("%q: %w", sc.Text(), err)
			}
			vals[f[i+1]] = v
		}
		if res.m[level] == nil {
			res.m[level] = map[string]map[string]float64{}
		}
		res.m[level][name] = vals
		if !slices.Contains(res.names, name) {
			res.names = append(res.names, name)
		}
	}
	if len(res.names) == 0 {
		return res, fmt.Errorf("no BenchmarkRedis results (is redis-server on PATH?)")
	}
	return res, sc.Err()
}

// names returns the contenders of s in the order of its first run.
func (s *side) names() []string {
	var out []string
	for _, r := range s.runs {
		for _, n := range r.names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// median returns the median of f over the runs where f reports a value,
// and false when none does.
func (s *side) median(f func(result) (float64, bool)) (float64, bool) {
	var xs []float64
	for _, r := range s.runs {
		if v, ok := f(r); ok {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2], true
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2, true
}

func metric(level, name, unit string) func(result) (float64, bool) {
	return func(r result) (float64, bool) {
		v, ok := r.m[level][name][unit]
		return v, ok
	}
}

// ratio is a contender's calls/s over the reference's in the same run.
func ratio(level, name string) func(result) (float64, bool) {
	return func(r result) (float64, bool) {
		v, ok1 := r.m[level][name]["decisions/s"]
		ref, ok2 := r.m[level][reference]["decisions/s"]
		if !ok1 || !ok2 || ref == 0 {
			return 0, false
		}
		return v / ref, true
	}
}

// busy is the server's CPU per second of the run: srv-cpu-µs/op ×
// calls/s / 10^6, the share of its one thread the contender kept busy (1
// means Redis was the bottleneck).
func busy(level, name string) func(result) (float64, bool) {
	return func(r result) (float64, bool) {
		v, ok1 := r.m[level][name]["decisions/s"]
		cpu, ok2 := r.m[level][name]["srv-cpu-µs/op"]
		return v * cpu / 1e6, ok1 && ok2
	}
}

func (s *side) print(w io.Writer) {
	fmt.Fprintf(w, "### %s\n\n", s.label)
	fmt.Fprintf(w, "| calls/s (median; ratio to %s in the same run, median) | 1 goroutine | 16 | 64 |\n|---|---|---|---|\n", reference)
	for _, n := range s.names() {
		fmt.Fprintf(w, "| %s |", n)
		for _, l := range levels {
			v, ok := s.median(metric(l, n, "decisions/s"))
			if !ok {
				fmt.Fprint(w, " — |")
				continue
			}
			if x, ok := s.median(ratio(l, n)); ok && n != reference {
				fmt.Fprintf(w, " %s (%.2f×) |", kilo(v), x)
			} else {
				fmt.Fprintf(w, " %s |", kilo(v))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| per call (medians): round-trips · client-cpu-µs · redis.calls · srv-exec-µs · srv-cpu-µs · srv-busy | 1 goroutine | 16 | 64 |\n|---|---|---|---|\n")
	for _, n := range s.names() {
		fmt.Fprintf(w, "| %s |", n)
		for _, l := range levels {
			var cells []string
			for _, u := range []string{"round-trips/op", "client-cpu-µs/op", "redis.calls/op", "srv-exec-µs/op", "srv-cpu-µs/op"} {
				if v, ok := s.median(metric(l, n, u)); ok {
					cells = append(cells, num(v))
				} else {
					cells = append(cells, "—")
				}
			}
			if v, ok := s.median(busy(l, n)); ok {
				cells = append(cells, fmt.Sprintf("%.2f", v))
			} else {
				cells = append(cells, "—")
			}
			fmt.Fprintf(w, " %s |", strings.Join(cells, " · "))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// printCompare prints head's median ratio to redis_rate over base's, per
// contender and level: > 1 means head gained on the same peer.
func printCompare(w io.Writer, base, head *side) {
	fmt.Fprintf(w, "### %s against %s\n\n", head.label, base.label)
	fmt.Fprintf(w, "| ratio to %s: %s / %s | 1 goroutine | 16 | 64 |\n|---|---|---|---|\n", reference, head.label, base.label)
	for _, n := range head.names() {
		if n == reference {
			continue
		}
		fmt.Fprintf(w, "| %s |", n)
		for _, l := range levels {
			h, ok1 := head.median(ratio(l, n))
			b, ok2 := base.median(ratio(l, n))
			if !ok1 || !ok2 || b == 0 {
				fmt.Fprint(w, " — |")
				continue
			}
			fmt.Fprintf(w, " %.2f× |", h/b)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func kilo(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1f k", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// tree returns the source tree of version v: v itself when it is a
// directory holding benchmarks/go.mod, else commit v extracted into dir.
// The label is v's short commit hash, or the directory's path (with
// "+dirty" left to the reader: a directory is used as it is).
func tree(v, dir string) (path, label string, err error) {
	if st, err := os.Stat(filepath.Join(v, "benchmarks", "go.mod")); err == nil && !st.IsDir() {
		abs, err := filepath.Abs(v)
		if err != nil {
			return "", "", err
		}
		label = abs
		if h, err := git(abs, "rev-parse", "--short", "HEAD"); err == nil {
			label = "tree at " + h
			if st, err := git(abs, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
				label += " (with uncommitted changes)"
			}
		}
		return abs, label, nil
	}
	h, err := git(".", "rev-parse", "--short", v+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("%q is neither a source tree nor a commit: %w", v, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	tarball := dir + ".tar"
	top, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", err
	}
	// From the top: in a subdirectory git archive takes only that.
	if _, err := git(top, "archive", "-o", tarball, h); err != nil {
		return "", "", fmt.Errorf("git archive %s: %w", h, err)
	}
	untar := exec.Command("tar", "-x", "-f", tarball, "-C", dir)
	untar.Stderr = os.Stderr
	if err := untar.Run(); err != nil {
		return "", "", fmt.Errorf("tar: %w", err)
	}
	return dir, "commit " + h, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

func safe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '(' || r == ')' {
			return '_'
		}
		return r
	}, s)
}

// tmpDir is removed on failure too.
var tmpDir string

func fail(err error) {
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	fmt.Fprintln(os.Stderr, "redistable:", err)
	os.Exit(1)
}
