package clientpool

import (
	"fmt"
	"time"
)

// EventKind says what happened to a limiter.
type EventKind int

// The kinds of Event.
const (
	// Admitted: a call was admitted under (Rule, Key) with Weight units,
	// after waiting Wait.
	Admitted EventKind = iota + 1
	// Paused: (Rule, Key) holds new starts until Until.
	Paused
	// Throttled: the server rejected a call for its rate (Status 429, or
	// 418 for an IP ban) that was charged Weight under (Rule, Key).
	Throttled
	// Reconciled: the server's usage header counted Weight more units than
	// the local window, which now counts them too. In Redis mode
	// (WithRedis) it is reported when the server's count is sent to Redis,
	// with Weight that count: Redis takes in what it did not know itself.
	Reconciled
)

// String returns the kind's name in lower case.
func (k EventKind) String() string {
	switch k {
	case Admitted:
		return "admitted"
	case Paused:
		return "paused"
	case Throttled:
		return "throttled"
	case Reconciled:
		return "reconciled"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what an observer (WithObserver) is told. Fields that do not apply
// to the Kind are zero.
type Event struct {
	Kind      EventKind
	Rule, Key string
	Weight    int64         // units
	Wait      time.Duration // Admitted: how long the call waited
	Until     time.Time     // Paused: when the pause ends
	Status    int           // Throttled: the HTTP status
}

func (p *Pool) emit(e Event) {
	if p.observer != nil {
		p.observer(e)
	}
}

func (p *Pool) emitAdmitted(charges []Charge, wait time.Duration) {
	if p.observer == nil {
		return
	}
	for _, c := range charges {
		p.observer(Event{Kind: Admitted, Rule: c.Rule, Key: c.Key, Weight: c.Weight, Wait: wait})
	}
}
