package accuracy

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Arrival is the server's record of one call.
type Arrival struct {
	At       time.Time // when the call reached the server (time.Now under the server's lock)
	Accepted bool      // whether the server accepted it
}

// Server enforces "at most N accepted arrivals in any window of T" exactly:
// an arrival at t is accepted iff fewer than N accepted arrivals lie in
// (t−T, t]. Rejected arrivals do not count against later ones. It keeps a
// log of every arrival. A Server is safe for concurrent use.
type Server struct {
	n   int
	per time.Duration

	mu       sync.Mutex
	accepted []time.Time // accepted arrivals that may still be in the window, oldest first
	log      []Arrival
}

// NewServer returns a server for the rule n per per. It panics unless n > 0
// and per > 0.
func NewServer(n int, per time.Duration) *Server {
	if n <= 0 || per <= 0 {
		panic(fmt.Sprintf("accuracy: NewServer(%d, %v): need n > 0 and per > 0", n, per))
	}
	return &Server{n: n, per: per}
}

// Arrive records a call arriving now (time.Now) and returns its record: the
// instant and whether the server accepted it.
func (s *Server) Arrive() Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arriveLocked(time.Now())
}

// ArriveAt records a call arriving at t and returns its record. Instants must
// not go backwards between calls; an earlier one is treated as the latest
// seen (and so recorded). It is meant for tests of the window itself.
func (s *Server) ArriveAt(t time.Time) Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arriveLocked(t)
}

func (s *Server) arriveLocked(t time.Time) Arrival {
	if k := len(s.log); k > 0 && t.Before(s.log[k-1].At) {
		t = s.log[k-1].At
	}
	// Drop accepted arrivals at or before t−T: they are outside (t−T, t].
	i := 0
	for i < len(s.accepted) && t.Sub(s.accepted[i]) >= s.per {
		i++
	}
	s.accepted = s.accepted[i:]
	ok := len(s.accepted) < s.n
	if ok {
		s.accepted = append(s.accepted, t)
	}
	a := Arrival{At: t, Accepted: ok}
	s.log = append(s.log, a)
	return a
}

// Arrivals returns a copy of the log of every arrival, in arrival order.
func (s *Server) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// MaxInWindow returns the largest number of instants in ts that lie in one
// half-open window (t−per, t], over all t. ts need not be sorted and is not
// modified. It panics if per ≤ 0.
func MaxInWindow(ts []time.Time, per time.Duration) int {
	if per <= 0 {
		panic("accuracy: MaxInWindow: per must be positive")
	}
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range s {
		for s[hi].Sub(s[lo]) >= per {
			lo++
		}
		// Instants equal to s[hi] after it are counted when hi reaches the
		// last of them.
		best = max(best, hi-lo+1)
	}
	return best
}
