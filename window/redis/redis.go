// Package redis keeps the windows of package window in Redis, so that
// several processes (replicas sharing one API key or one IP) share one
// limit. Each window is one Lua script: an admission decision is a single
// EVALSHA round trip, and so is a release, an extension or a cancellation.
// Scripts are sent with go-redis's Script.Run, which falls back to EVAL when
// the server answers NOSCRIPT (after SCRIPT FLUSH, a restart or a failover),
// so a server that lost its script cache costs one extra round trip, not an
// error.
//
// Every window has the same decisions as its in-memory twin in package
// window, given the same instants on a microsecond grid (the tests feed both
// the same random schedules):
//
//	NewCompletion            window.Completion, with leases for calls in flight
//	NewSlidingLog            window.SlidingLog (start window with a margin)
//	NewGCRA                  window.GCRA (emission interval rounded up to 1 µs)
//	NewTokenBucket           window.TokenBucket
//	NewFixedWindow           window.FixedWindow (aligned to the Unix epoch)
//	NewSlidingWindowCounter  window.SlidingWindowCounter
//
// # Clock
//
// The Redis server's clock (TIME, read inside the script) is the only clock:
// replicas whose clocks are skewed still agree, and nothing in this package
// reads the local clock unless WithClock says so (tests, simulations). The
// scripts work in whole microseconds since the Unix epoch, so a limit's Per,
// a margin and a lease must be whole microseconds. For one limiter time
// never goes back: an instant earlier than the latest one seen (a failover
// to a server whose clock is behind) is taken as that latest one.
//
// # Keys
//
// A window named name keeps its state under keys that begin with
// "ratesem:{tag}:" and go on with the kind of window, where tag is the name
// with every '%', '{' and '}' percent-encoded ("%25", "%7B", "%7D"): any
// name (binary bytes included) gives a non-empty, well-formed hash tag, so
// all keys of one limiter live in one slot of a Redis Cluster, and two
// names never share keys. A name without those three bytes is its own tag,
// as in "ratesem:{binance:spot}:completion:z". Names are 1 to MaxNameLen
// bytes.
// Every key has a TTL just over the time its state matters (one second
// more), refreshed by the scripts that write it (the completion window's
// admissions refresh it only when it would fall within half a second of
// that time, or when they create a key): an idle limiter leaves nothing
// behind. Windows of different kinds with the same name do not
// share state; windows of the same kind and name do, and must be built
// with the same limit in every process.
//
// # Pause
//
// Window.PauseFor holds every admission of every process sharing the window
// for a time (after a 429 with Retry-After, say): it writes the instant the
// pause ends, on the server's clock, to one more key, "ratesem:{tag}:" +
// kind + ":pause", which every admission script reads in the same round
// trip. A paused admission is refused with the time left as its wait. The
// key lives until the pause ends (plus the second of slack).
//
// # Lost state
//
// Redis may lose a limiter's keys: evicted under maxmemory (see
// CheckEviction: only the noeviction policy keeps them), deleted by FLUSHALL
// or by hand, or gone with a restart without persistence. The completion
// window and the sliding log detect it, in the admission script: a partial
// loss from the keys themselves (a sorted set gone while the hash counts
// units in it, or the reverse, or the count of calls in flight differing),
// and a whole loss from what the Window remembers of its own admissions
// (the state's epoch, and the instant until which its admissions keep the
// state alive). On a loss the script rebuilds what is left and treats the
// window as full for one Per (1 s at least in the completion window; Per +
// margin in the sliding log): Admit refuses with Decision.StateLost set and
// that wait, and so do the admissions of every process until it ends, since
// calls the window forgot may have ended within the last Per. A Release of
// a call admitted before the loss (within lease + Per of it) records the
// call as ended then, so it counts for a Per as it should, though Release
// still returns ErrNotInFlight.
//
// The other windows (GCRA, token bucket, fixed window, sliding window
// counter) keep one hash each. They detect a hash left with some of its
// fields only (deleted by hand: eviction takes a key whole), and a whole
// loss that the Window saw the state of (its epoch, and the instant until
// which the state must live, from every reply it got): the state is reset
// and held full for the time the window takes to forget (Per; burst ·
// emission interval for GCRA), with Decision.StateLost set.
//
// What no process remembers cannot be detected: a loss of a limiter every
// process of which is new, or idle for longer than the state mattered.
// Nor does it need to be: once the state stops mattering (every call it
// counted has left the window) forgetting it admits nothing more.
//
// # Limit
//
// The completion window and the sliding log store N with the state. A
// process built with another N is served under the smaller of the two (the
// smaller is kept until the state expires), and Decision.LimitMismatch says
// so.
//
// # When Redis is unreachable
//
// Every method returns the go-redis error (wrapped, with the operation and
// the limiter's name); none falls back to local state. A restarted server
// (without persistence) comes back empty: the limiters start from an idle
// state, and tokens issued before the restart are no longer in flight.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// Limit is window.Limit: N units per Per. Here Per must be a whole number of
// microseconds.
type Limit = window.Limit

// DefaultLease is the lease of a call in flight in the completion window
// unless WithLease sets another.
const DefaultLease = time.Minute

// ErrNotInFlight is returned by Release, Extend and Cancel of a completion
// window for a token that is not in flight: it was released or cancelled
// already, its lease ran out and the window has forgotten the call, the
// server lost its state (a restart), or it is not a token of this window.
var ErrNotInFlight = errors.New("ratesem/redis: no such call in flight")

// MaxNameLen is the longest name a window takes, in bytes, after the
// encoding of '%', '{' and '}' (3 bytes each) into the keys' hash tag. A
// longer name is an error from every constructor.
const MaxNameLen = 1024

// ErrEviction is matched (errors.Is) by the error CheckEviction returns for
// a server whose maxmemory-policy is not noeviction.
var ErrEviction = errors.New("ratesem/redis: the server may evict the limiter's keys (maxmemory-policy is not noeviction)")

// maxMicros bounds every duration and count handed to the scripts, so that
// an instant plus a few of them stays below 2^53, where Lua's doubles are
// exact integers.
const maxMicros = 1 << 50

// Decision is the outcome of Window.Admit.
type Decision struct {
	// OK reports whether the call was admitted.
	OK bool
	// Wait is, when OK is false, how long from At until the call could be
	// admitted if nothing else changed: no other admission, and no call in
	// flight ending (in the completion window a call in flight is taken to
	// end when its lease runs out). It is 0 when OK is true. A caller that
	// sleeps Wait (plus jitter) and tries again polls no more than needed.
	Wait time.Duration
	// InFlight is set, in the completion window only, when OK is false and
	// the units of calls in flight (with leases not run out) leave no room
	// for the call: a Release anywhere may then make room well before Wait,
	// which counts the calls in flight until their leases run out (the
	// in-memory window returns no instant at all in that case).
	InFlight bool
	// Token identifies an admitted call (OK true, n > 0) for Release,
	// Extend and Cancel. It is empty otherwise.
	Token string
	// StateLost is set on the refusal that found the window's state lost
	// in Redis, all of it or part (see the package doc): the window was
	// rebuilt from what was left and counts as full for Wait (one Per,
	// burst × emission interval for GCRA).
	StateLost bool
	// LimitMismatch is set when the state in Redis was written with
	// another N than this Window's: the decision was made under the
	// smaller. Completion window and sliding log only.
	LimitMismatch bool
	// At is the instant of the decision: the server's clock, read by the
	// script (or the WithClock instant), in microseconds. It is the zero
	// time.Time for a call of 0 units, which is admitted without a round
	// trip.
	At time.Time
}

// Option configures a Window.
type Option func(*options)

type options struct {
	lease time.Duration
	now   func() time.Time
}

// WithLease sets how long a call admitted by a completion window counts as
// in flight without a Release (default DefaultLease, rounded up to a whole
// microsecond; it must be positive). When the lease runs out the call is
// taken to have ended then, so its units count until lease expiry + Per:
// this is how the slot of a replica that died mid-call comes back. Pick a
// lease longer than the calls take, or Extend long calls. Other windows
// ignore it.
func WithLease(d time.Duration) Option { return func(o *options) { o.lease = d } }

// WithClock makes the window pass now() to its scripts as the current
// instant (truncated to a microsecond) instead of letting them read the
// server's clock. It is for tests and simulations: replicas that pass their
// own clocks no longer agree. The instants of one limiter must not go back
// (an earlier one is taken as the latest seen).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

type kind int

const (
	kindCompletion kind = iota
	kindSlidingLog
	kindGCRA
	kindTokenBucket
	kindFixedWindow
	kindSlidingCounter
)

var kindNames = [...]string{"completion", "log", "gcra", "bucket", "fixed", "counter"}

// Window is a rate window kept in Redis and shared by every process that
// builds one of the same kind with the same name. It is safe for concurrent
// use; its methods block for one round trip to Redis and never wait for
// room: a refused Admit says how long to wait instead. The round trip is
// bounded by ctx only if the client was built with ContextTimeoutEnabled;
// otherwise go-redis ignores ctx's deadline while it waits for a reply and
// only its ReadTimeout (3 s by default) bounds it. semaphore/redissem bounds
// every round trip itself, whatever the client.
type Window struct {
	client goredis.UniversalClient
	name   string
	kind   kind
	limit  Limit
	keys   []string
	akeys  []string // keys of the admission scripts: keys, then the pause key
	cap    int64    // units a call may have at most

	per, margin, lease, emit, burst int64 // µs, µs, µs, µs per unit, units
	now                             func() time.Time

	idPrefix string
	seq      atomic.Uint64

	// What this Window knows of the state (completion window and sliding
	// log): its epoch (creation instant, µs); the instant until which what
	// it saw keeps the state alive (µs, 0 when none): its own admissions and
	// releases (until they stop counting) and the refusals it got (units
	// count until the wait is over, at least a Per of it); and, in the
	// completion window, its own calls in flight (own) and the latest
	// instant one of them counts until if never released (leaseEnd).
	memMu         sync.Mutex
	epoch, must   int64
	own, leaseEnd int64
}

// NewCompletion returns the completion window for l (see window.Completion):
// at every instant, units in flight + units of calls that ended in
// (now−Per, now] ≤ N. An admitted call is in flight until Release (which
// stamps its end), Cancel (which erases it) or the end of its lease (see
// WithLease; Extend lengthens it). Per may be 0: the window then only caps
// the units in flight across processes. It returns an error matching
// window.ErrInvalidLimit for N ≤ 0, a negative Per or one that is not a
// whole number of microseconds, or values too large for the scripts (over
// 2^50 µs, about 35 years), and an error for an empty name or a
// non-positive lease.
func NewCompletion(c goredis.UniversalClient, name string, l Limit, opts ...Option) (*Window, error) {
	return newWindow(c, name, kindCompletion, l, 0, 0, true, opts)
}

// NewSlidingLog returns the start window with a margin for l (see
// window.SlidingLog): each start is recorded margin late, so at every
// instant t the units of calls that started in (t−Per−margin, t] are at most
// N. Per must be positive; margin must be a whole number of microseconds,
// 0 or more. Errors as for NewCompletion.
func NewSlidingLog(c goredis.UniversalClient, name string, l Limit, margin time.Duration, opts ...Option) (*Window, error) {
	if margin < 0 || margin%time.Microsecond != 0 || margin/time.Microsecond > maxMicros {
		return nil, fmt.Errorf("ratesem/redis: margin %v: want a whole number of microseconds, 0 to 2^50", margin)
	}
	return newWindow(c, name, kindSlidingLog, l, int64(margin/time.Microsecond), 0, false, opts)
}

// NewGCRA returns the generic cell rate algorithm for l with bursts of up to
// burst units (0 means N), as window.NewGCRA, except that the emission
// interval Per/N is rounded up to a whole microsecond rather than a
// nanosecond (slower, never faster); the decisions are the same when N
// divides Per in microseconds. Per must be positive. Errors as for
// NewCompletion, and for a negative burst or burst·Per/N over 2^50 µs.
func NewGCRA(c goredis.UniversalClient, name string, l Limit, burst int64, opts ...Option) (*Window, error) {
	return newWindow(c, name, kindGCRA, l, 0, burst, false, opts)
}

// NewTokenBucket returns a token bucket of burst units (0 means N), full at
// first and refilled at N units per Per, as window.NewTokenBucket: the
// refill is exact integer arithmetic with the remainder carried. Per must
// be positive. Errors as for NewCompletion, and for a negative burst.
func NewTokenBucket(c goredis.UniversalClient, name string, l Limit, burst int64, opts ...Option) (*Window, error) {
	return newWindow(c, name, kindTokenBucket, l, 0, burst, false, opts)
}

// NewFixedWindow returns the fixed window counter for l, as
// window.NewFixedWindow: windows of Per aligned to the Unix epoch (window
// index floor(now/Per), as Binance counts), at most N units starting in
// each. Per must be positive. Errors as for NewCompletion.
func NewFixedWindow(c goredis.UniversalClient, name string, l Limit, opts ...Option) (*Window, error) {
	return newWindow(c, name, kindFixedWindow, l, 0, 0, false, opts)
}

// NewSlidingWindowCounter returns the sliding window counter for l, as
// window.NewSlidingWindowCounter: the previous aligned window weighted by
// how much of it overlaps (now−Per, now], in exact integer arithmetic. Per
// must be positive. Errors as for NewCompletion.
func NewSlidingWindowCounter(c goredis.UniversalClient, name string, l Limit, opts ...Option) (*Window, error) {
	return newWindow(c, name, kindSlidingCounter, l, 0, 0, false, opts)
}

func newWindow(c goredis.UniversalClient, name string, k kind, l Limit, margin, burst int64, perZeroOK bool, opts []Option) (*Window, error) {
	o := options{lease: DefaultLease}
	for _, opt := range opts {
		opt(&o)
	}
	invalid := func(why string) error {
		return fmt.Errorf("ratesem/redis: %s window %q: limit %v: %w: %s", kindNames[k], name, l, window.ErrInvalidLimit, why)
	}
	switch {
	case c == nil:
		return nil, errors.New("ratesem/redis: nil client")
	case name == "":
		return nil, errors.New("ratesem/redis: empty limiter name")
	case len(name) > MaxNameLen:
		return nil, fmt.Errorf("ratesem/redis: limiter name of %d bytes: want at most MaxNameLen (%d)", len(name), MaxNameLen)
	case l.N <= 0 || l.N > maxMicros:
		return nil, invalid("N must be 1 to 2^50")
	case l.Per < 0 || l.Per == 0 && !perZeroOK:
		return nil, invalid("Per must be positive")
	case l.Per%time.Microsecond != 0 || l.Per/time.Microsecond > maxMicros:
		return nil, invalid("Per must be a whole number of microseconds, up to 2^50")
	case burst < 0 || burst > maxMicros:
		return nil, invalid(fmt.Sprintf("burst %d: want 0 (N) to 2^50", burst))
	case o.lease <= 0 || o.lease > maxMicros*time.Microsecond:
		return nil, fmt.Errorf("ratesem/redis: lease %v: want a positive duration up to 2^50 µs", o.lease)
	}
	if burst == 0 {
		burst = l.N
	}
	w := &Window{
		client: c, name: name, kind: k, limit: l,
		per: int64(l.Per / time.Microsecond), margin: margin, burst: burst,
		lease: ceilMicros(o.lease), now: o.now,
	}
	w.cap = l.N
	switch k {
	case kindGCRA:
		w.cap = burst
		w.emit = (w.per + l.N - 1) / l.N
		if hi, lo := bits.Mul64(uint64(burst), uint64(w.emit)); hi != 0 || lo > maxMicros {
			return nil, invalid(fmt.Sprintf("burst %d × emission interval %d µs exceeds 2^50 µs", burst, w.emit))
		}
	case kindTokenBucket:
		w.cap = burst
	}
	tag, err := hashTag(name)
	if err != nil {
		return nil, err
	}
	prefix := "ratesem:{" + tag + "}:" + kindNames[k]
	switch k {
	case kindCompletion:
		w.keys = []string{prefix + ":z", prefix + ":l", prefix + ":h"}
	case kindSlidingLog:
		w.keys = []string{prefix + ":z", prefix + ":h"}
	default:
		w.keys = []string{prefix}
	}
	w.akeys = append(append([]string(nil), w.keys...), prefix+":pause")
	var id [8]byte
	_, _ = rand.Read(id[:])
	w.idPrefix = hex.EncodeToString(id[:])
	return w, nil
}

// hashTag returns the hash tag of the keys of the limiter named name: name
// with '%', '{' and '}' percent-encoded, so that it holds no brace (Redis
// Cluster hashes the bytes between the first '{' and the first '}' after
// it) and the encoding stays injective. It fails for an empty name and a
// tag longer than MaxNameLen.
func hashTag(name string) (string, error) {
	if name == "" {
		return "", errors.New("ratesem/redis: empty limiter name")
	}
	k := strings.Count(name, "%") + strings.Count(name, "{") + strings.Count(name, "}")
	if len(name)+2*k > MaxNameLen {
		return "", fmt.Errorf("ratesem/redis: limiter name of %d bytes (%d once encoded): want at most MaxNameLen (%d)", len(name), len(name)+2*k, MaxNameLen)
	}
	if k == 0 {
		return name, nil
	}
	var b strings.Builder
	b.Grow(len(name) + 2*k)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func ceilMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Name returns the limiter's name, as given to the constructor.
func (w *Window) Name() string { return w.name }

// Limit returns the limit the window enforces.
func (w *Window) Limit() Limit { return w.limit }

// Capacity returns the most units one call may have: the burst for GCRA and
// the token bucket, N for the others. Admit refuses a heavier call with an
// error matching window.ErrWeightTooLarge.
func (w *Window) Capacity() int64 { return w.cap }

// Keys returns the Redis keys that hold the window's state, all with the
// hash tag {tag} (see Keys in the package doc). Each has a TTL while it
// exists. The pause key (see PauseFor) is not among them: it exists only
// while a pause is set.
func (w *Window) Keys() []string { return append([]string(nil), w.keys...) }

// PauseKey returns the key that holds the window's pause (see PauseFor),
// with the hash tag {tag}. It exists, with a TTL, only while a pause is
// set.
func (w *Window) PauseKey() string { return w.akeys[len(w.akeys)-1] }

// PauseFor holds every admission of every process sharing the window (same
// kind and name) for d from now, the server's clock, in one round trip:
// until then Admit refuses with the time left as Decision.Wait, and counts
// nothing. Calls in flight go on; Release, Extend and Cancel are not held.
// Overlapping pauses do not add up: the later end wins. d is rounded up to a
// whole microsecond; d ≤ 0 does nothing and returns the zero time. It
// returns the instant the pause ends (the server's clock: the later of this
// one and one already set), and the Redis error, wrapped, when the script
// could not run.
func (w *Window) PauseFor(ctx context.Context, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, nil
	}
	us := min(ceilMicros(d), maxMicros)
	r, err := pauseScript.Run(ctx, w.client, []string{w.PauseKey()}, w.nowArg(), us).Int64Slice()
	if err != nil {
		return time.Time{}, w.errorf("pause", err)
	}
	if len(r) != 2 {
		return time.Time{}, w.errorf("pause", fmt.Errorf("unexpected reply %v", r))
	}
	return time.UnixMicro(r[0]), nil
}

// nowArg is the scripts' ARGV[1]: "" to read the server's clock.
func (w *Window) nowArg() string {
	if w.now == nil {
		return ""
	}
	return strconv.FormatInt(w.now().UnixMicro(), 10)
}

func (w *Window) errorf(op string, err error) error {
	return fmt.Errorf("ratesem/redis: %s %s %q: %w", op, kindNames[w.kind], w.name, err)
}

// Admit decides, in one round trip, whether a call of n units may start
// now, and if so counts it; while a pause set by PauseFor lasts it refuses,
// with the time left as the wait. A call of 0 units is admitted without a
// round trip. It returns an error matching window.ErrWeightTooLarge when n
// exceeds Capacity (such a call could never start), an error for a negative
// n, and the Redis error, wrapped, when the script could not run (the call
// is then not counted, unless the failure came after the server ran the
// script, as with a lost reply).
func (w *Window) Admit(ctx context.Context, n int64) (Decision, error) {
	switch {
	case n < 0:
		return Decision{}, fmt.Errorf("ratesem/redis: Admit(%d): %w", n, window.ErrNegativeWeight)
	case n == 0:
		return Decision{OK: true}, nil
	case n > w.cap:
		return Decision{}, fmt.Errorf("%w: weight %d, capacity %d (%v)", window.ErrWeightTooLarge, n, w.cap, w.limit)
	}
	now := w.nowArg()
	var (
		script *goredis.Script
		args   []any
		token  string
	)
	switch w.kind {
	case kindCompletion:
		token = w.member(n)
		e, m := w.memory()
		script, args = completionAdmit, []any{now, n, w.limit.N, w.per, w.lease, token, e, m}
	case kindSlidingLog:
		token = w.member(n)
		e, m := w.memory()
		script, args = slidingLogAdmit, []any{now, n, w.limit.N, w.per, w.margin, token, e, m}
	case kindGCRA:
		e, m := w.memory()
		script, args = gcraAdmit, []any{now, n, w.emit, w.burst, e, m}
	case kindTokenBucket:
		e, m := w.memory()
		script, args = tokenBucketAdmit, []any{now, n, w.limit.N, w.per, w.burst, e, m}
	case kindFixedWindow:
		e, m := w.memory()
		script, args = fixedWindowAdmit, []any{now, n, w.limit.N, w.per, e, m}
	case kindSlidingCounter:
		e, m := w.memory()
		script, args = slidingCounterAdmit, []any{now, n, w.limit.N, w.per, e, m}
	}
	r, err := script.Run(ctx, w.client, w.akeys, args...).Int64Slice()
	if err != nil {
		return Decision{}, w.errorf("admit", err)
	}
	rep, err := parseAdmit(r)
	if err != nil {
		return Decision{}, w.errorf("admit", err)
	}
	d := Decision{OK: rep.ok, InFlight: rep.inFlight, At: time.UnixMicro(rep.now),
		StateLost: rep.lost, LimitMismatch: rep.mismatch}
	if d.OK {
		if token == "" {
			token = strconv.FormatInt(n, 10) + ":" + strconv.FormatInt(rep.now, 10)
		}
		d.Token = token
	} else {
		d.Wait = time.Duration(rep.wait) * time.Microsecond
	}
	w.remember(rep)
	return d, nil
}

// admitReply is an admission script's reply, checked.
type admitReply struct {
	ok, inFlight, lost, mismatch bool
	wait, now, epoch             int64 // µs; wait ≤ 2^50, 0 when ok
	until                        int64 // µs, the one-hash windows: the state lives until then; 0 if unknown
}

// parseAdmit checks an admission script's reply: {admitted 0/1, wait µs,
// in flight 0/1, now µs[, flags, epoch[, until µs]]}. Every value must be in range (a
// wait beyond 2^50 µs saturates there; a negative one is an error): a
// reply the scripts never give (another script under the same keys, a
// proxy's garbage) is an error, never a decision.
func parseAdmit(r []int64) (admitReply, error) {
	if len(r) != 4 && len(r) != 6 && len(r) != 7 {
		return admitReply{}, fmt.Errorf("unexpected reply %v", r)
	}
	bit := func(v int64) bool { return v == 1 }
	if r[0]|1 != 1 || r[2]|1 != 1 || r[1] < 0 || r[3] < 0 {
		return admitReply{}, fmt.Errorf("unexpected reply %v", r)
	}
	a := admitReply{ok: bit(r[0]), inFlight: bit(r[2]), wait: min(r[1], maxMicros), now: r[3]}
	if a.ok {
		a.wait = 0
	} else if a.wait == 0 && !a.inFlight {
		// A refusal with no wait would have its caller ask again at once.
		// The scripts do not give one; take the safe side.
		a.wait = 1000
	}
	if len(r) == 7 {
		if r[6] < 0 {
			return admitReply{}, fmt.Errorf("unexpected reply %v", r)
		}
		a.until = r[6]
	}
	if len(r) >= 6 {
		if r[4] < 0 || r[4] > 3 || r[5] < 0 {
			return admitReply{}, fmt.Errorf("unexpected reply %v", r)
		}
		a.lost, a.mismatch, a.epoch = r[4]&1 != 0, r[4]&2 != 0, r[5]
		if a.lost && a.ok {
			return admitReply{}, fmt.Errorf("unexpected reply %v", r)
		}
	}
	return a, nil
}

// memory returns the scripts' ARGV epoch and must: "" for both when the
// Window knows of no state it must find.
func (w *Window) memory() (epoch, must string) {
	w.memMu.Lock()
	e, m := w.epoch, w.must
	if w.own > 0 {
		m = max(m, w.leaseEnd)
	}
	w.memMu.Unlock()
	if m == 0 {
		return "", ""
	}
	return strconv.FormatInt(e, 10), strconv.FormatInt(m, 10)
}

// remember records what a reply says of the state: its epoch (which only
// moves forward: replies of concurrent calls may come out of order), and,
// for an admission or a loss, the instant until which the state must exist.
func (w *Window) remember(r admitReply) {
	if r.epoch == 0 {
		return
	}
	w.memMu.Lock()
	defer w.memMu.Unlock()
	w.epoch = max(w.epoch, r.epoch)
	if w.kind != kindCompletion && w.kind != kindSlidingLog {
		// The one-hash windows say how long their state lives; only a
		// Cancel (of an admission after which none came) shortens it, to
		// no less than its own TTL.
		w.must = max(w.must, min(r.until, r.now+maxMicros))
		return
	}
	switch {
	case r.ok:
		w.must = max(w.must, r.now+w.per)
		if w.kind == kindCompletion {
			w.own++
			w.leaseEnd = max(w.leaseEnd, r.now+w.lease+w.per)
		}
	case r.lost:
		w.must = max(w.must, r.now+r.wait)
	default:
		// The units that refused count until the wait is over; a release
		// may bring that down to its own end + Per, which is later than
		// now + Per.
		w.must = max(w.must, r.now+min(r.wait, w.per))
	}
}

// ended records that the Window's own call with token ended (released,
// cancelled, or forgotten by Redis) at now (µs, 0 when unknown): it counts
// until now + Per at most.
func (w *Window) ended(token string, now int64) {
	if !strings.HasPrefix(token[strings.IndexByte(token, ':')+1:], w.idPrefix) {
		return
	}
	w.memMu.Lock()
	defer w.memMu.Unlock()
	if w.own > 0 {
		w.own--
	}
	if now > 0 {
		w.must = max(w.must, now+w.per)
	}
}

// member returns a new sorted-set member for a call of n units: the weight,
// then an id unique across processes (a random prefix per Window and a
// sequence number).
func (w *Window) member(n int64) string {
	return strconv.FormatInt(n, 10) + ":" + w.idPrefix + strconv.FormatUint(w.seq.Add(1), 36)
}

// Release records that the call with token ended now (the server's clock):
// in the completion window its units leave flight and count until now + Per.
// A call whose lease ran out, but that the window still counts (until lease
// end + Per), is stamped with this real end all the same. It returns ErrNotInFlight when the token is not in flight (see there), and
// the Redis error, wrapped, when the script could not run. A call the
// window forgot in a loss of its state (see Lost state in the package doc)
// is still recorded as ended now, and ErrNotInFlight returned. In the other
// windows, which count starts only, it does nothing and returns nil, as
// does an empty token (a call of 0 units).
func (w *Window) Release(ctx context.Context, token string) error {
	_, err := w.release(ctx, token)
	return err
}

// release is Release, returning the instant recorded as the call's end in
// microseconds (0 when nothing was recorded).
func (w *Window) release(ctx context.Context, token string) (int64, error) {
	if w.kind != kindCompletion || token == "" {
		return 0, nil
	}
	_, must := w.memory()
	at, err := w.leaseOp(ctx, "release", completionRelease, token, w.lease, must)
	if err == nil || errors.Is(err, ErrNotInFlight) {
		w.ended(token, at)
	}
	return at, err
}

// Extend lengthens the lease of the call with token in the completion
// window to lease from now (the server's clock), if that is later than its
// current lease end: a call that takes longer than its lease calls it
// before the lease runs out, or the window takes it as ended. lease is
// rounded up to a whole microsecond and must be positive. It returns
// ErrNotInFlight when the token is not in flight, and the Redis error,
// wrapped, when the script could not run. In the other windows it does
// nothing and returns nil, as does an empty token.
func (w *Window) Extend(ctx context.Context, token string, lease time.Duration) error {
	if lease <= 0 || lease > maxMicros*time.Microsecond {
		return fmt.Errorf("ratesem/redis: Extend: lease %v: want a positive duration up to 2^50 µs", lease)
	}
	if w.kind != kindCompletion || token == "" {
		return nil
	}
	at, err := w.leaseOp(ctx, "extend", completionExtend, token, ceilMicros(lease))
	if err == nil {
		w.memMu.Lock()
		w.leaseEnd = max(w.leaseEnd, at+ceilMicros(lease)+w.per)
		w.memMu.Unlock()
	}
	return err
}

func (w *Window) leaseOp(ctx context.Context, op string, s *goredis.Script, token string, extra ...any) (int64, error) {
	args := append([]any{w.nowArg(), w.per, token}, extra...)
	r, err := s.Run(ctx, w.client, w.keys, args...).Int64Slice()
	if err != nil {
		return 0, w.errorf(op, err)
	}
	if len(r) != 2 || r[0]|1 != 1 || r[1] < 0 {
		return 0, w.errorf(op, fmt.Errorf("unexpected reply %v", r))
	}
	if r[0] != 1 {
		return r[1], w.errorf(op, ErrNotInFlight)
	}
	return r[1], nil
}

// Cancel undoes the admission with token, for a call that was admitted but
// never started (its caller gave up), as the in-memory window's Cancel
// does: the completion window and the sliding log erase its units; the
// token bucket and GCRA give them back only if no admission came after it;
// the fixed window and the sliding window counter take them off the count
// of the window the call was admitted in, if that is still counted. In the
// completion window it returns ErrNotInFlight when the token is not in
// flight; elsewhere nothing to undo is not an error. It returns the Redis
// error, wrapped, when the script could not run, and an error for a token
// this kind of window did not issue. An empty token does nothing.
func (w *Window) Cancel(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	if w.kind == kindCompletion {
		_, err := w.leaseOp(ctx, "cancel", completionCancel, token)
		if err == nil || errors.Is(err, ErrNotInFlight) {
			w.ended(token, 0)
		}
		return err
	}
	if w.kind == kindSlidingLog {
		if err := slidingLogCancel.Run(ctx, w.client, w.keys, w.nowArg(), token).Err(); err != nil {
			return w.errorf("cancel", err)
		}
		return nil
	}
	n, at, err := parseToken(token, w.cap)
	if err != nil {
		return w.errorf("cancel", err)
	}
	var s *goredis.Script
	var extra int64
	switch w.kind {
	case kindGCRA:
		s, extra = gcraCancel, w.emit
	case kindTokenBucket:
		s, extra = tokenBucketCancel, w.burst
	case kindFixedWindow:
		s, extra = fixedWindowCancel, w.per
	case kindSlidingCounter:
		s, extra = slidingCounterCancel, w.per
	}
	if err := s.Run(ctx, w.client, w.keys, "", at, n, extra).Err(); err != nil {
		return w.errorf("cancel", err)
	}
	return nil
}

// CheckEviction reads the server's maxmemory-policy (CONFIG GET) and
// returns it, with an error matching ErrEviction when it is not
// noeviction. Any other policy lets Redis delete keys when memory runs
// short: the allkeys-* policies may take a limiter's keys, and the
// volatile-* policies take only keys with a TTL, which every key of a
// limiter has, so they pick the limiter's keys first. A window whose keys
// are evicted forgets calls it counted: the completion window and the
// sliding log detect it and refuse for a Per (see Lost state in the
// package doc), the other windows start again from idle and may admit up
// to the limit again within the window.
//
// On a Redis Cluster it checks every master. When the server refuses
// CONFIG (managed services often rename or forbid it), it returns "" and
// the Redis error, which does not match ErrEviction: the caller decides.
// It blocks for the round trips, bounded by ctx (and by the client's
// timeouts: a client built without ContextTimeoutEnabled ignores ctx's
// deadline while waiting for a reply).
func CheckEviction(ctx context.Context, c goredis.UniversalClient) (string, error) {
	if cc, ok := c.(*goredis.ClusterClient); ok {
		var (
			mu     sync.Mutex
			policy string
			bad    error
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			p, err := CheckEviction(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			if policy == "" || p != "noeviction" {
				policy = p
			}
			if errors.Is(err, ErrEviction) {
				bad = err
				return nil
			}
			return err
		})
		if err != nil {
			return "", err
		}
		return policy, bad
	}
	m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", fmt.Errorf("ratesem/redis: CONFIG GET maxmemory-policy: %w", err)
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", errors.New("ratesem/redis: CONFIG GET maxmemory-policy: no such parameter in the reply")
	}
	if p != "noeviction" {
		return p, fmt.Errorf("%w: it is %s", ErrEviction, p)
	}
	return p, nil
}

// parseToken parses the token of an admission of the windows that count
// starts only (GCRA, token bucket, fixed window, sliding window counter):
// "<units>:<admission instant µs>", units 1 to capacity and the instant 0
// to 2^53 (Lua's exact integers), in plain decimal digits.
func parseToken(token string, capacity int64) (n, at int64, err error) {
	ns, ats, ok := strings.Cut(token, ":")
	digits := func(s string) bool {
		if s == "" || len(s) > 19 {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	if !ok || !digits(ns) || !digits(ats) {
		return 0, 0, fmt.Errorf("malformed token %q", token)
	}
	n, err1 := strconv.ParseInt(ns, 10, 64)
	at, err2 := strconv.ParseInt(ats, 10, 64)
	if err1 != nil || err2 != nil || n <= 0 || n > capacity || at > 1<<53 {
		return 0, 0, fmt.Errorf("malformed token %q", token)
	}
	return n, at, nil
}
