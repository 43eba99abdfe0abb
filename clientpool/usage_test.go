package clientpool_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// A usage header that reports more than the local count shrinks the local
// budget; one that reports less never loosens it.
func TestTicketObserveHeadersShrinksNeverLoosens(t *testing.T) {
	rule := clientpool.Rule{
		Name: "ip", Limit: window.Limit{N: 10, Per: time.Minute}, Window: func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
		Usage: clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
	}
	p := newPool(t, []clientpool.Rule{rule})
	tk := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 2})
	tk.Release()
	tk.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "1")) // less than local: nothing
	if got := p.Snapshot()[0].Used; got != 2 {
		t.Fatalf("Used = %d after a lower server count, want 2", got)
	}
	tk.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "9")) // another client spent 7
	if got := p.Snapshot()[0].Used; got != 9 {
		t.Fatalf("Used = %d after the server counted 9, want 9", got)
	}
	if tk, err := p.Acquire(canceledAfter(t), clientpool.Charge{Rule: "ip", Weight: 2}); err == nil {
		tk.Release()
		t.Fatal("admitted 2 with 9 of 10 used")
	}
}

func TestClassify(t *testing.T) {
	table := clientpool.Table{
		Rules: []clientpool.Rule{
			ruleN("ip", 100, time.Second),
			{Name: "inst", Limit: window.Limit{N: 10, Per: time.Second}, Key: func(r *http.Request) (string, bool) {
				id := r.URL.Query().Get("instId")
				return id, id != ""
			}},
		},
		Endpoints: []clientpool.Endpoint{
			{Method: "GET", Path: "/books", Costs: []clientpool.Cost{{Rule: "ip", Units: 2}, {Rule: "inst"}}},
			{Path: "/any-method", Costs: []clientpool.Cost{{Rule: "ip", Weight: func(*http.Request) int64 { return 7 }}}},
		},
		Default: []clientpool.Cost{{Rule: "ip", Units: 1}},
	}
	p, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, url string
		want        []clientpool.Charge
	}{
		{"GET", "/books?instId=BTC", []clientpool.Charge{{Rule: "ip", Weight: 2}, {Rule: "inst", Key: "BTC", Weight: 1}}},
		{"GET", "/books", []clientpool.Charge{{Rule: "ip", Weight: 2}}}, // inst's Key does not apply
		{"POST", "/any-method", []clientpool.Charge{{Rule: "ip", Weight: 7}}},
		{"GET", "/elsewhere", []clientpool.Charge{{Rule: "ip", Weight: 1}}},
		{"POST", "/books", []clientpool.Charge{{Rule: "ip", Weight: 1}}}, // method differs: default
	} {
		got, err := p.Classify(httptest.NewRequest(tc.method, tc.url, nil))
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Classify(%s %s) = %v, %v; want %v", tc.method, tc.url, got, err, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("Classify(%s %s) = %v; want %v", tc.method, tc.url, got, tc.want)
			}
		}
	}
}

// Ticket.ObserveHeaders compares the server's count with the calls of the
// window that had ended when the call was admitted, so calls still on their
// way are not mistaken for room: A and B are admitted; A's response says 5
// (a foreign 4 plus A; B has not arrived yet), so the window must count 4 +
// A + B = 6. B's response then says 6: that may be 5 foreign + B with A
// still on its way (calls can overtake each other on the wire), so the
// window counts 7, the most the server may end up with. C, admitted once A
// and B ended, says 7: nothing new (7 − the 2 that had ended − C = 4 ≤ the
// 5 taken in).
func TestTicketObserveHeadersInFlight(t *testing.T) {
	rule := clientpool.Rule{
		Name: "ip", Limit: window.Limit{N: 10, Per: time.Minute},
		Window: func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) },
		Usage:  clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
	}
	p := newPool(t, []clientpool.Rule{rule})
	a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1})
	b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1})
	a.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "5"))
	if got := p.Snapshot()[0].Used; got != 6 {
		t.Fatalf("Used = %d after A's response said 5, want 6 (4 foreign + A + B)", got)
	}
	b.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "6"))
	if got := p.Snapshot()[0].Used; got != 6 {
		t.Fatalf("Used = %d after B's response said 6, want 6 (4 foreign + A + B: A, reported at 5, was counted before 6)", got)
	}
	a.Release()
	b.Release()
	c := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1})
	c.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "7"))
	if got := p.Snapshot()[0].Used; got != 7 {
		t.Fatalf("Used = %d after C's response said 7, want 7 (4 foreign + A + B + C, each counted once)", got)
	}
	c.Release()
}
