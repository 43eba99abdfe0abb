// Package peek reads the "code" field that exchange APIs put in their JSON
// error bodies (OKX's "50011", Binance's -1003) from the first bytes of a
// response body, as far as the caller's reads have seen it. It never reads
// a body itself.
package peek

import (
	"bytes"
	"encoding/json"
)

// Max is the most bytes of a body that Code looks at: the exchanges put
// the code first, and a bound keeps the cost of a huge or deeply nested
// body constant. It is also the prefix of a response body that an
// httpclient.Transport hands its WithThrottledBody hook.
const Max = 512

// MaxReplay is the most bytes of a request body without GetBody that an
// httpclient.Transport keeps in memory so that its Selector can read the
// body before the request is sent (32 MiB); saas presets size their own
// reads by it.
const MaxReplay = 32 << 20

// MaxSettle is the most bytes of a response body a clientpool Rule.Settle
// function is shown: an httpclient.Transport keeps the last MaxSettle bytes
// the caller read (1 MiB, the whole of most LLM replies; of a longer one,
// its end, where the usage object is).
const MaxSettle = 1 << 20

// Code returns the top-level "code" field of a JSON object as text (a JSON
// string as is, a number in its decimal form), or "" when body is not such
// an object or has no code among its first Max bytes. A body cut short
// after the code still yields it. It never panics, is safe for concurrent
// use, and its cost is bounded by Max whatever len(body) is.
func Code(body []byte) string {
	body = body[:min(len(body), Max)]
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		if k == "code" {
			v, err := dec.Token()
			if err != nil {
				return ""
			}
			switch v := v.(type) {
			case string:
				return v
			case json.Number:
				return v.String()
			}
			return ""
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}
