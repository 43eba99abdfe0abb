package saastest

import (
	"encoding/json"
	"errors"
	"slices"
	"time"
	"unicode/utf8"
)

// textOf reads a message content: a JSON string, or an array of content
// blocks whose "text" fields are concatenated (other blocks count 0
// characters). null or absent is "".
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("content must be a string or an array of content blocks")
	}
	var out []byte
	for _, b := range blocks {
		out = append(out, b.Text...)
	}
	return string(out), nil
}

func runes(s string) int64 { return int64(utf8.RuneCountInString(s)) }

// llmEvent is one change of a bucket in the order the server made it: a
// charge at arrival or a settlement at the reply.
type llmEvent struct {
	seq     uint64
	at      time.Time
	entry   int
	settle  bool
	charges [3]int64 // requests, tokens (input), output
}

// journal keeps the order of charges and settlements so a log can be
// replayed exactly (Violations).
type journal struct {
	seq    uint64
	events []llmEvent
}

func (j *journal) add(ev llmEvent) {
	j.seq++
	ev.seq = j.seq
	j.events = append(j.events, ev)
}

// replay runs the events through fresh buckets of limits per key (made by
// mk) and returns the accepted entries that found a bucket without room
// for their charge.
func replay(log []Entry, events []llmEvent, mk func(key string, at time.Time) [3]*bucket) []Entry {
	bs := map[string][3]*bucket{}
	var bad []Entry
	evs := slices.Clone(events)
	slices.SortFunc(evs, func(a, b llmEvent) int { return int(a.seq) - int(b.seq) })
	for _, ev := range evs {
		e := log[ev.entry]
		b, ok := bs[e.Key]
		if !ok {
			b = mk(e.Key, ev.at)
			bs[e.Key] = b
		}
		broke := false
		for i, bk := range b {
			if bk == nil {
				continue
			}
			bk.advance(ev.at)
			c := ev.charges[i]
			if !ev.settle && !bk.has(c) {
				broke = true
			}
			bk.add(-float64(c))
		}
		if broke {
			bad = append(bad, e)
		}
	}
	return bad
}

// lowest returns the lowest level of each bucket slot over every key.
func lowest(bs map[string][3]*bucket, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, b := range bs {
		for i, bk := range b {
			if bk == nil || names[i] == "" {
				continue
			}
			if v, ok := out[names[i]]; !ok || bk.low < v {
				out[names[i]] = bk.low
			}
		}
	}
	return out
}
