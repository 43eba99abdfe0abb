// Command llm-batch is ratesem's LLM example: a batch job that sends a few
// thousand chat completions and embeddings with random prompt sizes and
// max_tokens through the OpenAI preset (package saas/openai), with an
// errgroup fan-out, against the OpenAI test server of package saas/saastest,
// which enforces requests and tokens per minute per model as token buckets,
// charges each request at arrival and settles it to its usage when it
// replies (https://platform.openai.com/docs/guides/rate-limits). With
// -quantized the server quantizes its limits too, as the guide warns the API
// may ("60,000 requests/minute may be enforced as 1,000 requests/second"):
// each per-minute limit holds over a 60th of the minute as well, which the
// preset's quantum rules follow (openai.RuleQuantum, with a margin for the
// jitter of arrivals: -margin). On real time at -scale 60 a quantum lasts
// 17 ms, next to which a busy machine's scheduling delays are not small:
// the test runs the quantized server on virtual time.
//
//	go run ./examples/llm-batch                  # 2000 requests, a minute lasts 1 s
//	go run ./examples/llm-batch -n 5000 -scale 30
//	go run ./examples/llm-batch -compare=false   # settled run only
//	go run ./examples/llm-batch -quantized       # a server that quantizes its limits
//	go run ./examples/llm-batch -margin 2ms      # the quantum rules' margin (openai.WithQuantumMargin)
//	go run ./examples/llm-batch -quantum=false   # the preset without its quantum rules
//
// The preset is given no limit: it learns each model's from the first reply
// (one request at a time until then). It prints progress every minute of the
// server's clock, then, for each model, the requests and tokens per minute
// used in the steady state (the middle 60% of the run) against the limits.
// With -compare (the default) it runs the batch twice: with each call
// settled to its usage, and with settling off (the estimate — the prompt's
// characters over 4 plus max_tokens — stands), and reports both. It exits
// with status 1 if any request was rejected or failed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/openai"
	"github.com/ratesem/ratesem/saas/saastest"
)

// The models of the batch and the limits the server gives them (OpenAI's
// tier-1-like figures; the client is not told them).
const (
	chatModel  = "gpt-4o-mini"
	embedModel = "text-embedding-3-small"
)

var limits = map[string]saastest.OpenAILimit{
	chatModel:  {RPM: 500, TPM: 200_000},
	embedModel: {RPM: 3000, TPM: 1_000_000},
}

// config is one run of the batch.
type config struct {
	n           int     // requests
	scale       float64 // the server's minute lasts time.Minute/scale
	settle      bool    // settle each call to its usage
	workers     int     // the fan-out's concurrency
	seed        uint64
	quantized   bool          // the server enforces each limit over a 60th of the minute too
	noQuantum   bool          // the preset without its quantum rules (openai.WithoutQuantum)
	margin      time.Duration // the quantum rules' margin; 0: the preset's default, 20 ms (openai.WithQuantumMargin)
	inMemory    bool          // serve over in-memory pipes (tests, in a synctest bubble)
	progress    io.Writer     // nil: no progress lines
	latencyBase time.Duration
}

// modelUse is what one model used in the steady state, per minute.
type modelUse struct {
	model              string
	requests, tokens   float64 // per minute
	rpm, tpm           int64   // the limits
	accepted, rejected int
}

// result is one run's outcome.
type result struct {
	use       []modelUse
	rejected  int
	failed    int
	elapsed   time.Duration // on the server's clock
	learnedOK bool          // the pool learned the server's limits
}

func main() {
	n := flag.Int("n", 2000, "requests to send")
	scale := flag.Float64("scale", 60, "the server's minute lasts time.Minute/scale")
	workers := flag.Int("workers", 64, "concurrent workers of the fan-out")
	compare := flag.Bool("compare", true, "run again with settling off and compare")
	quantized := flag.Bool("quantized", false, "the server enforces each per-minute limit over a 60th of the minute too")
	// The margin is real time while the server's minute is scaled: at
	// -scale 60 a quantum lasts 1/60 s, so the preset's 20 ms (for a
	// network) would cost the quanta most of their rate, while on a busy
	// machine the scheduler delays some arrivals by a few milliseconds
	// (against a quantizing server, at 1, 2 and 5 ms runs of 2000 saw up to
	// 3 rejections): the test (TestBatchQuantized) checks the quantized
	// server on virtual time.
	quantum := flag.Bool("quantum", true, "the preset's quantum rules (false: openai.WithoutQuantum, for comparison)")
	margin := flag.Duration("margin", 2*time.Millisecond, "the quantum rules' margin: the spread of latency to the server they absorb (real time, not scaled; 0 or less: the preset's default, 20 ms)")
	flag.Parse()
	cfg := config{n: *n, scale: *scale, settle: true, workers: *workers, seed: 1, progress: os.Stdout, latencyBase: 500 * time.Millisecond,
		quantized: *quantized, margin: *margin, noQuantum: !*quantum}
	runs := []bool{true}
	if *compare {
		runs = append(runs, false)
	}
	bad := false
	var summary []string
	for _, settle := range runs {
		cfg.settle = settle
		fmt.Printf("== %d requests, settling %v, server minute %v, quantized %v\n", cfg.n, onOff(settle), time.Duration(float64(time.Minute)/cfg.scale), onOff(cfg.quantized))
		r, err := run(context.Background(), cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		report(os.Stdout, r)
		bad = bad || r.rejected > 0 || r.failed > 0
		for _, u := range r.use {
			if u.model == chatModel {
				summary = append(summary, fmt.Sprintf("settling %-3s: %5.1f%% of %s's TPM, %d rejections, %.1f server-minutes",
					onOff(settle), 100*u.tokens/float64(u.tpm), chatModel, r.rejected, minutes(r.elapsed, cfg.scale)))
			}
		}
	}
	fmt.Println("== summary (steady state, the binding limit)")
	for _, s := range summary {
		fmt.Println(s)
	}
	if bad {
		os.Exit(1)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func minutes(d time.Duration, scale float64) float64 { return d.Minutes() * scale }

// run sends the batch and reads the server's log.
func run(ctx context.Context, cfg config) (result, error) {
	lat := cfg.latencyBase
	srv := saastest.NewOpenAI(saastest.OpenAIConfig{
		Models: limits, Scale: cfg.scale, InMemory: cfg.inMemory, Seed: cfg.seed, Quantized: cfg.quantized,
		// an LLM's reply takes 0.5 to 4 server-seconds
		Latency: func() time.Duration {
			return time.Duration(float64(lat+time.Duration(rand.Int64N(int64(7*lat)))) / cfg.scale)
		},
	})
	defer srv.Close()
	opts := []openai.Option{openai.WithModel(chatModel, 0, 0), openai.WithModel(embedModel, 0, 0), openai.WithScale(cfg.scale)}
	if !cfg.settle {
		opts = append(opts, openai.WithoutSettling())
	}
	if cfg.noQuantum {
		opts = append(opts, openai.WithoutQuantum())
	}
	if cfg.margin > 0 {
		opts = append(opts, openai.WithQuantumMargin(cfg.margin))
	}
	pool, err := clientpool.New(openai.Table(opts...))
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}

	rng := rand.New(rand.NewPCG(cfg.seed, 2))
	type job struct {
		path string
		body []byte
	}
	jobs := make([]job, cfg.n)
	for i := range jobs {
		words := 20 + rng.IntN(1500)
		prompt := strings.Repeat("lorem ", words)
		var body any
		path := "/v1/chat/completions"
		if rng.IntN(5) == 0 {
			path = "/v1/embeddings"
			body = map[string]any{"model": embedModel, "input": prompt}
		} else {
			body = map[string]any{"model": chatModel, "max_tokens": 100 + rng.IntN(1500),
				"messages": []map[string]string{{"role": "user", "content": prompt}}}
		}
		b, _ := json.Marshal(body)
		jobs[i] = job{path, b}
	}

	var done, failed atomic.Int64
	stop := make(chan struct{})
	if cfg.progress != nil {
		go func() {
			tick := time.NewTicker(time.Duration(float64(time.Minute) / cfg.scale))
			defer tick.Stop()
			for m := 1; ; m++ {
				select {
				case <-stop:
					return
				case <-tick.C:
					st := srv.Stats()
					fmt.Fprintf(cfg.progress, "  minute %3d: %5d/%d done, %d rejected\n", m, done.Load(), cfg.n, rejections(st))
				}
			}
		}()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.workers)
	for _, j := range jobs {
		g.Go(func() error {
			req, err := http.NewRequestWithContext(gctx, "POST", srv.URL()+j.path, bytes.NewReader(j.body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return nil
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
			done.Add(1)
			return nil
		})
	}
	err = g.Wait()
	close(stop)
	if err != nil {
		return result{}, err
	}

	log := srv.Log()
	res := result{rejected: rejections(srv.Stats()), failed: int(failed.Load()) - rejections(srv.Stats()), learnedOK: true}
	if len(log) == 0 {
		return res, nil
	}
	first, last := log[0].At, log[len(log)-1].At
	res.elapsed = last.Sub(first)
	from, to := first.Add(res.elapsed/5), last.Add(-res.elapsed/5)
	perMinute := float64(time.Minute) / cfg.scale
	span := float64(to.Sub(from)) / perMinute
	byModel := map[string]*modelUse{}
	for m, l := range limits {
		byModel[m] = &modelUse{model: m, rpm: l.RPM, tpm: l.TPM}
		if got, _ := pool.Limit(openai.RuleTokens(m)); got.N != l.TPM {
			res.learnedOK = false
		}
	}
	for _, e := range log {
		u := byModel[e.Key]
		if u == nil {
			continue
		}
		if !e.Accepted() {
			u.rejected++
			continue
		}
		u.accepted++
		if e.At.Before(from) || !e.At.Before(to) {
			continue
		}
		u.requests++
		if e.Settled {
			u.tokens += float64(e.TrueTokens)
		} else {
			u.tokens += float64(e.Tokens)
		}
	}
	for _, u := range byModel {
		if span > 0 {
			u.requests /= span
			u.tokens /= span
		}
		res.use = append(res.use, *u)
	}
	sort.Slice(res.use, func(i, j int) bool { return res.use[i].model < res.use[j].model })
	return res, nil
}

func rejections(st saastest.Stats) int {
	n := 0
	for _, k := range st.Rejected {
		n += k
	}
	return n
}

// report prints a run's use of each model's limits.
func report(w io.Writer, r result) {
	for _, u := range r.use {
		fmt.Fprintf(w, "  %-24s %6.1f req/min of %5d (%5.1f%%)  %9.0f tokens/min of %8d (%5.1f%%)  accepted %d, rejected %d\n",
			u.model, u.requests, u.rpm, 100*u.requests/float64(u.rpm), u.tokens, u.tpm, 100*u.tokens/float64(u.tpm), u.accepted, u.rejected)
	}
	fmt.Fprintf(w, "  limits learned from the first reply: %v; rejected %d, failed %d\n", r.learnedOK, r.rejected, r.failed)
}
