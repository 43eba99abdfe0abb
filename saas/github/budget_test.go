package github_test

import (
	"testing"
	"testing/synctest"
	"time"
)

// A crawl's budget counts each call the server may not have counted once:
// a reply's remaining already counts the calls that reached the server
// before it, so the budget leaves out the calls admitted after it and
// those admitted before it still in flight (which may reach the server
// after it). On the base commit it left out every call in flight besides
// the later admissions (counting those twice, and the reply's own call):
// with 100 requests in flight (GitHub's concurrency cap) a window of 300
// saw 101-113 requests, and 800 took 83.5 s of the scaled hours of 10 s;
// now 151 and 59.5 s. Every full window must see at least 140, with no
// rejection, on a host's clock exact, ahead or behind. (The calls admitted
// before a reply and still in flight, nearly always counted by the server
// already, still cost about half of each window here.)
func TestCrawlSpendsEachWindow(t *testing.T) {
	for _, skew := range []time.Duration{0, 2 * time.Second, -2 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, log := crawlSkewedLog(t, skew, nil)
				if len(st.Rejected) != 0 || st.Accepted != 800 {
					t.Fatalf("accepted %d, rejected %v", st.Accepted, st.Rejected)
				}
				per := map[time.Time]int{}
				var order []time.Time
				for _, e := range log {
					if !e.Accepted() {
						continue
					}
					if per[e.Reset] == 0 {
						order = append(order, e.Reset)
					}
					per[e.Reset]++
				}
				for i, r := range order {
					t.Logf("window %d: %d requests", i, per[r])
					if i < len(order)-1 && per[r] < 140 {
						t.Errorf("window %d: %d requests of 300", i, per[r])
					}
				}
			})
		})
	}
}
