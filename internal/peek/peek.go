// Package peek reads the start of an HTTP response body without taking it
// from the caller, and the "code" field that exchange APIs put in their JSON
// error bodies (OKX's "50011", Binance's -1003).
package peek

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// Body returns up to n bytes from the start of resp.Body and puts them back:
// the caller still reads the whole body, and Close still closes the
// original. A read error other than EOF is returned to the caller's later
// Read, after the peeked bytes. It returns nil for a nil or empty body.
func Body(resp *http.Response, n int) []byte {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	buf := make([]byte, n)
	k, err := io.ReadFull(resp.Body, buf)
	buf = buf[:k]
	var rest io.Reader = resp.Body
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		rest = errReader{err}
	}
	resp.Body = peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), rest), Closer: resp.Body}
	return buf
}

type peekedBody struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

// Read returns the error the original body gave.
func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Code returns the top-level "code" field of a JSON object as text (a JSON
// string as is, a number in its decimal form), or "" when body is not such
// an object or has no code among its first bytes.
func Code(body []byte) string {
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
