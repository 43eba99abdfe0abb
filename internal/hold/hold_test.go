package hold

import (
	"testing"
	"time"
)

// TestHold checks the hold of an RPC without a reply: Default
// before any reply, twice the longest of the last Samples times to a
// first reply, Max at most, and a long time forgotten once
// Samples later ones came.
func TestHold(t *testing.T) {
	var l Latency
	if got := l.Hold(); got != Default {
		t.Fatalf("no sample: hold %v, want %v", got, Default)
	}
	l.Add(3 * time.Millisecond)
	l.Add(40 * time.Millisecond)
	l.Add(-time.Second) // a clock step: counted as 0
	if got := l.Hold(); got != 80*time.Millisecond {
		t.Fatalf("hold %v, want 80ms (2 × the longest)", got)
	}
	for range Samples - 1 {
		l.Add(5 * time.Millisecond)
	}
	if got := l.Hold(); got != 10*time.Millisecond {
		t.Fatalf("hold %v after %d short samples, want 10ms: the 40ms one is past the ring", got, Samples-1)
	}
	l.Add(time.Hour)
	if got := l.Hold(); got != Max {
		t.Fatalf("hold %v after an hour-long sample, want Max %v", got, Max)
	}
	l.Add(1<<63 - 1)
	if got := l.Hold(); got != Max {
		t.Fatalf("hold %v after the largest Duration, want Max %v", got, Max)
	}
}
