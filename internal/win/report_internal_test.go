package win

import (
	"testing"
	"time"
)

// Units Consume took in (clientpool's Learn, on a key's first report,
// counts the server's count and the calls in flight so) are a count of the
// whole window for the usage reports that follow: a report of a lower
// count, which the server made earlier, never gives them back; one of a
// higher count bounds the units from elsewhere anew.
func TestFixedCompletionReportAfterConsume(t *testing.T) {
	l := Limit{N: 100, Per: time.Minute}
	w := NewFixedCompletion(l)
	now := time.Unix(1_700_000_040, 0) // a minute's start
	if _, ok := w.Admit(now, 10); !ok {
		t.Fatal("refused 10")
	}
	win, ended, _, _ := w.mark(now.UnixNano())
	w.Consume(now, 70)
	if got := w.Used(now); got != 80 {
		t.Fatalf("Used = %d after Consume(70), want 80", got)
	}
	if d, _ := w.report(now.UnixNano(), win, 30, ended, 10, true); d != 0 || w.Used(now) != 80 {
		t.Fatalf("a lower count changed the window by %d to %d, want 0 and 80", d, w.Used(now))
	}
	// B's count of 100, B admitted with nothing ended: A (reported at a
	// lower count) and B were counted, so at most 80 from elsewhere.
	if _, ok := w.Admit(now, 10); !ok {
		t.Fatal("refused B")
	}
	if d, _ := w.report(now.UnixNano(), win, 100, ended, 10, true); d != 10 || w.Used(now) != 100 {
		t.Fatalf("B's count of 100 changed the window by %d to %d, want +10 and 100", d, w.Used(now))
	}
}
