package grpcsem

import (
	"testing"
	"time"
)

// TestLatencyHold checks the hold of an RPC without a reply: defaultHold
// before any reply, twice the longest of the last latencySamples times to a
// first reply, maxHold at most, and a long time forgotten once
// latencySamples later ones came.
func TestLatencyHold(t *testing.T) {
	var l latency
	if got := l.hold(); got != defaultHold {
		t.Fatalf("no sample: hold %v, want %v", got, defaultHold)
	}
	l.add(3 * time.Millisecond)
	l.add(40 * time.Millisecond)
	l.add(-time.Second) // a clock step: counted as 0
	if got := l.hold(); got != 80*time.Millisecond {
		t.Fatalf("hold %v, want 80ms (2 × the longest)", got)
	}
	for range latencySamples - 1 {
		l.add(5 * time.Millisecond)
	}
	if got := l.hold(); got != 10*time.Millisecond {
		t.Fatalf("hold %v after %d short samples, want 10ms: the 40ms one is past the ring", got, latencySamples-1)
	}
	l.add(time.Hour)
	if got := l.hold(); got != maxHold {
		t.Fatalf("hold %v after an hour-long sample, want maxHold %v", got, maxHold)
	}
	l.add(1<<63 - 1)
	if got := l.hold(); got != maxHold {
		t.Fatalf("hold %v after the largest Duration, want maxHold %v", got, maxHold)
	}
}
