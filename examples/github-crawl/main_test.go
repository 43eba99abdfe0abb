package main

import (
	"context"
	"testing"
	"testing/synctest"
)

// The example's targets, on virtual time, for a token another program has
// already used most of: no rejection, the limit learned from the first
// response, and every secondary limit held at the server — across the
// primary window's reset.
func TestCrawlTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config{repos: 12, issues: 150, scale: 1, limit: 5000, used: 4000, workers: 200, inMemory: true}
		r, err := crawl(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if !r.ok(cfg) {
			t.Fatalf("targets missed: %+v", r)
		}
		if r.requests < 2000 || r.elapsed.Minutes() < 30 {
			t.Fatalf("the crawl should outlast the 1000 requests left in the first window: %d requests in %v", r.requests, r.elapsed)
		}
	})
}
