package hold

import (
	"strconv"
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

// TestByKey: one Latency per key for the first MaxKeys keys, the same on
// every call; past them a fresh one each call (held Default), so an
// attacker naming many hosts grows nothing past MaxKeys.
func TestByKey(t *testing.T) {
	var b ByKey
	a := b.For("a")
	a.Add(40 * time.Millisecond)
	if b.For("a") != a || b.For("a").Hold() != 80*time.Millisecond {
		t.Fatal(`For("a") is not the Latency it returned before`)
	}
	for i := range MaxKeys - 1 {
		b.For(strconv.Itoa(i))
	}
	past := b.For("one too many")
	past.Add(time.Millisecond)
	if b.For("one too many") == past || b.For("one too many").Hold() != Default {
		t.Fatal("a key past MaxKeys is kept")
	}
	if got := b.n.Load(); got != MaxKeys {
		t.Fatalf("%d keys kept, want %d", got, MaxKeys)
	}
}
