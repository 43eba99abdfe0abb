package hold

import (
	"sync"
	"testing"
	"time"
)

// TestHrevAddInProgress: Add takes its slot (next) before it stores the
// sample. A Hold between the two must not read the empty slot as a sample
// of 0 (a hold of 0: a call without a reply released at once): before any
// sample is stored it is Default, and an empty slot is no sample.
func TestHrevAddInProgress(t *testing.T) {
	var l Latency
	l.next.Add(1) // an Add between taking slot 0 and storing it
	if got := l.Hold(); got != Default {
		t.Fatalf("hold %v with a slot taken but not stored yet, want Default %v", got, Default)
	}
	l.Add(0) // slot 1: a sample of 0 is one
	if got := l.Hold(); got != 0 {
		t.Fatalf("hold %v after a stored 0, want 0", got)
	}
	l.Add(3 * time.Millisecond) // slot 2
	if got := l.Hold(); got != 6*time.Millisecond {
		t.Fatalf("hold %v, want 6ms", got)
	}
}

// TestHrevConcurrent: 1000 goroutines add and read at once (run with
// -race); every Hold is Default (no sample stored yet) or twice a sample,
// never 0 while only 5 ms samples are added.
func TestHrevConcurrent(t *testing.T) {
	var l Latency
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			l.Add(5 * time.Millisecond)
			if h := l.Hold(); h != Default && h != 10*time.Millisecond {
				t.Errorf("hold %v, want %v or 10ms", h, Default)
			}
		})
	}
	wg.Wait()
	if got := l.Hold(); got != 10*time.Millisecond {
		t.Fatalf("hold %v, want 10ms", got)
	}
}
