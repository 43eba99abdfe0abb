package okx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// scope is what a rule's key is made of.
type scope int

const (
	byIP         scope = iota // the client's own IP: one key, ""
	byIPInstType              // query instType
	byIPInstID                // query instId
	byUID                     // header OK-ACCESS-KEY
	byUIDInstID               // OK-ACCESS-KEY | instId (the instrument family for options)
)

// String describes the key in the package documentation's table.
func (s scope) String() string {
	switch s {
	case byIP:
		return "IP"
	case byIPInstType:
		return "IP + instType"
	case byIPInstID:
		return "IP + instId"
	case byUID:
		return "UID"
	case byUIDInstID:
		return "UID + instId"
	}
	return fmt.Sprintf("scope(%d)", int(s))
}

// key is the Rule.Key of a rule of scope s. For UID + instId it reads the
// instId from the query, or for a POST from the JSON body through GetBody;
// a body that cannot be read that way makes the rule not apply (false). The
// preset's own POST endpoints use Endpoint.Charges instead, which reports
// such a body as an error.
func (s scope) key(req *http.Request) (string, bool) {
	uid := req.Header.Get(HeaderAPIKey)
	inst := req.URL.Query().Get("instId")
	if s == byUIDInstID && req.Method == http.MethodPost {
		var o order
		if err := readJSON(req, &o); err != nil {
			return "", false
		}
		inst = o.InstID
	}
	return s.keyOf(uid, inst, req), true
}

// keyOf returns the key of scope s for a request of user uid on instrument
// inst. The UID + instId key is uid + "|" + the instrument (see instrument).
func (s scope) keyOf(uid, inst string, req *http.Request) string {
	switch s {
	case byIPInstType:
		return req.URL.Query().Get("instType")
	case byIPInstID:
		return inst
	case byUID:
		return uid
	case byUIDInstID:
		return uid + "|" + instrument(inst)
	}
	return ""
}

// instrument returns what OKX's trade limits count per: the instrument ID,
// except for options, whose rule is "User ID + Instrument Family": an option
// ID such as BTC-USD-250328-100000-C (family, expiry, strike, C or P) maps
// to its family, BTC-USD.
func instrument(instID string) string {
	parts := strings.Split(instID, "-")
	if len(parts) == 5 && (parts[4] == "C" || parts[4] == "P") {
		return parts[0] + "-" + parts[1]
	}
	return instID
}

// order is the part of an order request the limits read.
type order struct {
	InstID string `json:"instId"`
}

// maxBody bounds the body read to classify a request. OKX's largest order
// request, a batch of 20 orders, is a few kilobytes.
const maxBody = 1 << 20

// errNoGetBody is wrapped by the error for a POST body that cannot be read
// without consuming it.
var errNoGetBody = errors.New("the request has a body but no GetBody, so it cannot be read without consuming it (build it with http.NewRequest and a bytes.Reader, bytes.Buffer or strings.Reader)")

// readJSON decodes the request body into v, read through req.GetBody so that
// req.Body stays unread for the transport. An absent or empty body leaves v
// as it is.
func readJSON(req *http.Request, v any) error {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	if req.GetBody == nil {
		return fmt.Errorf("ratesem: %s %s: %w", req.Method, req.URL.Path, errNoGetBody)
	}
	rc, err := req.GetBody()
	if err != nil {
		return fmt.Errorf("ratesem: %s %s: GetBody: %w", req.Method, req.URL.Path, err)
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, maxBody+1))
	if err != nil {
		return fmt.Errorf("ratesem: %s %s: reading the body: %w", req.Method, req.URL.Path, err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("ratesem: %s %s: body larger than %d bytes", req.Method, req.URL.Path, maxBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("ratesem: %s %s: body: %w", req.Method, req.URL.Path, err)
	}
	return nil
}
