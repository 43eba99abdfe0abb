package main

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The example's targets, on virtual time: no request rejected, the limits
// learned from the first reply, at least 90% of the chat model's tokens per
// minute (the binding limit) used in the steady state when calls settle,
// and less without settling.
func TestBatchTargets(t *testing.T) {
	var used [2]float64
	for i, settle := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			r, err := run(context.Background(), config{n: 1500, scale: 1, settle: settle, workers: 64, seed: 1, inMemory: true, latencyBase: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if r.rejected != 0 || r.failed != 0 {
				t.Fatalf("settle %v: %d rejected, %d failed", settle, r.rejected, r.failed)
			}
			if !r.learnedOK {
				t.Fatalf("settle %v: limits not learned", settle)
			}
			for _, u := range r.use {
				if u.model == chatModel {
					used[i] = u.tokens / float64(u.tpm)
				}
				t.Logf("settle %v: %s %.1f%% of TPM, %.1f%% of RPM", settle, u.model, 100*u.tokens/float64(u.tpm), 100*u.requests/float64(u.rpm))
			}
		})
	}
	if used[0] < 0.9 || !(used[1] < used[0]) {
		t.Fatalf("chat TPM used: settled %.1f%%, not settled %.1f%%", 100*used[0], 100*used[1])
	}
}

// Against a server that quantizes its limits (each per-minute limit held
// over a 60th of the minute too, saastest.OpenAIConfig.Quantized), on
// virtual time: the preset, with its quantum rules, has no request
// rejected and still uses at least 90% of the chat model's tokens per
// minute in the steady state. The control, the same batch through the
// preset without its quantum rules (openai.WithoutQuantum, the preset
// before issue 21), is rejected by that server: the test can fail.
func TestBatchQuantized(t *testing.T) {
	for _, noQuantum := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r, err := run(context.Background(), config{n: 1500, scale: 1, settle: true, workers: 64, seed: 1, inMemory: true,
				latencyBase: 500 * time.Millisecond, quantized: true, noQuantum: noQuantum})
			if err != nil {
				t.Fatal(err)
			}
			var used float64
			for _, u := range r.use {
				if u.model == chatModel {
					used = u.tokens / float64(u.tpm)
				}
				t.Logf("without quantum %v: %s %.1f%% of TPM, %.1f%% of RPM, accepted %d, rejected %d",
					noQuantum, u.model, 100*u.tokens/float64(u.tpm), 100*u.requests/float64(u.rpm), u.accepted, u.rejected)
			}
			if noQuantum {
				if r.rejected == 0 {
					t.Fatalf("without the quantum rules: no request rejected by the quantizing server")
				}
				return
			}
			if r.rejected != 0 || r.failed != 0 || !r.learnedOK {
				t.Fatalf("%d rejected, %d failed, limits learned %v", r.rejected, r.failed, r.learnedOK)
			}
			if used < 0.9 {
				t.Fatalf("chat TPM used %.1f%%, want ≥ 90%%", 100*used)
			}
		})
	}
}
