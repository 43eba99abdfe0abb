package httpclient_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/httpclient"
)

func TestParseRetryAfter(t *testing.T) {
	// now is fixedNow (Fri, 14 Mar 2025 15:09:26 UTC); dates below are
	// now + 2m30s unless the name says otherwise.
	later := fixedNow.Add(150 * time.Second)
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		// delay-seconds
		{in: "120", want: 120 * time.Second},
		{in: "0", want: 0},
		{in: " 7 ", want: 7 * time.Second},
		{in: "\t7\t", want: 7 * time.Second},
		{in: "007", want: 7 * time.Second},
		{in: "9223372036", want: 9223372036 * time.Second}, // largest whole second a Duration holds
		{in: "9223372037", want: time.Duration(math.MaxInt64)},
		{in: "99999999999999999999", want: time.Duration(math.MaxInt64)}, // saturates, not negative
		{in: strings.Repeat("9", 400), want: time.Duration(math.MaxInt64)},

		// HTTP-dates: the three forms of http.ParseTime and RFC1123 "UTC".
		{in: "Fri, 14 Mar 2025 15:11:56 GMT", want: 150 * time.Second},           // IMF-fixdate
		{in: later.Format(http.TimeFormat), want: 150 * time.Second},             // same, via http.TimeFormat
		{in: later.Format(time.RFC850), want: 150 * time.Second},                 // "Friday, 14-Mar-25 15:11:56 UTC"
		{in: "Friday, 14-Mar-25 15:11:56 GMT", want: 150 * time.Second},          // RFC 850 as servers send it
		{in: later.Format(time.ANSIC), want: 150 * time.Second},                  // "Fri Mar 14 15:11:56 2025"
		{in: "Fri Mar  4 15:09:26 2025", want: 0},                                // ANSI C, ten days ago
		{in: later.Format(time.RFC1123), want: 150 * time.Second},                // "Fri, 14 Mar 2025 15:11:56 UTC"
		{in: " " + later.Format(http.TimeFormat) + " ", want: 150 * time.Second}, // trimmed
		{in: fixedNow.Format(http.TimeFormat), want: 0},                          // now
		{in: fixedNow.Add(-time.Hour).Format(http.TimeFormat), want: 0},          // past
		{in: "Thu, 01 Jan 1970 00:00:00 GMT", want: 0},                           // long past
		{in: "Fri, 14 Mar 2025 15:11:56 EST", wantErr: true},                     // zone would be misread as UTC
		{in: "Fri, 14 Mar 2025 15:11:56", wantErr: true},                         // no zone
		{in: "Fri, 32 Mar 2025 15:11:56 GMT", wantErr: true},                     // no such day

		// invalid
		{in: "-5", wantErr: true},
		{in: "-0", wantErr: true},
		{in: "", wantErr: true},
		{in: "   ", wantErr: true},
		{in: "soon", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "+5", wantErr: true},
		{in: "5s", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "١٢", wantErr: true}, // Arabic-Indic digits are not ASCII digits
		{in: "12 34", wantErr: true},

		// adversarial
		{in: "+0", wantErr: true},
		{in: "+120", wantErr: true},
		{in: "-", wantErr: true},
		{in: "--5", wantErr: true},
		{in: "-99999999999999999999", wantErr: true},
		{in: "-9223372036854775808", wantErr: true},
		{in: "１２", wantErr: true}, // fullwidth digits
		{in: "12\x00", wantErr: true},
		{in: "0x10", wantErr: true},
		{in: "1_000", wantErr: true},
		{in: "120, 120", wantErr: true}, // a repeated header joined
		{in: "\xff\xfe", wantErr: true},
		{in: strings.Repeat("9", 1<<20), want: time.Duration(math.MaxInt64)},                        // 1 MB of digits: saturates
		{in: strings.Repeat("0", 1<<20) + "5", want: 5 * time.Second},                               // 1 MB of leading zeros
		{in: strings.Repeat("x", 1<<20), wantErr: true},                                             // 1 MB of text: rejected on its length
		{in: "-" + strings.Repeat("9", 1<<20), wantErr: true},                                       // 1 MB negative
		{in: "Fri, 14 Mar 2025 15:11:56 GMT" + strings.Repeat("x", 1<<20), wantErr: true},           // a date with 1 MB of trailing junk
		{in: "Fri, 14 Mar 2025 15:11:56 GMT" + strings.Repeat(" ", 1<<20), want: 150 * time.Second}, // trailing whitespace is trimmed
		{in: "Wednesday, 19-Mar-25 15:09:26 GMT", want: 5 * 24 * time.Hour},                         // the longest date form, 33 bytes
		{in: "Fri, 31 Dec 9999 23:59:59 GMT", want: time.Duration(math.MaxInt64)},                   // far future: saturates
		{in: "Sat, 01 Jan 0000 00:00:00 GMT", want: 0},                                              // far past
		{in: "Sunday, 06-Nov-69 08:49:37 GMT", want: 0},                                             // two-digit year 69 is 1969
		{in: "Fri, 14 Mar 2025 25:11:56 GMT", wantErr: true},                                        // no such hour
	}
	for _, tc := range tests {
		got, err := httpclient.ParseRetryAfter(tc.in, fixedNow)
		if tc.wantErr {
			if assert.Error(t, err, "ParseRetryAfter(%.80q) = %v, want error", tc.in, got) {
				assert.True(t, strings.HasPrefix(err.Error(), "ratesem: "), "error %q lacks the package prefix", err)
				quoted := fmt.Sprintf("%q", tc.in)
				if len(tc.in) > 64 {
					quoted = fmt.Sprintf("%q… (%d bytes)", tc.in[:64], len(tc.in))
					assert.Less(t, len(err.Error()), 512, "error about a %d-byte value is %d bytes", len(tc.in), len(err.Error()))
				}
				assert.Contains(t, err.Error(), quoted, "error %.200q does not quote the input", err)
			}
			assert.Equal(t, time.Duration(0), got, "ParseRetryAfter(%.80q) with error", tc.in)
			continue
		}
		if assert.NoError(t, err, "ParseRetryAfter(%.80q)", tc.in) {
			assert.Equal(t, tc.want, got, "ParseRetryAfter(%.80q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// The delay is measured from the now argument, not the machine's clock.
func TestParseRetryAfterUsesNow(t *testing.T) {
	date := "Wed, 21 Oct 2015 07:28:00 GMT"
	d, err := httpclient.ParseRetryAfter(date, time.Date(2015, 10, 21, 7, 27, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.Equal(t, time.Minute, d)

	// now in another zone, with sub-second part.
	loc := time.FixedZone("UTC+2", 2*60*60)
	d, err = httpclient.ParseRetryAfter(date, time.Date(2015, 10, 21, 9, 27, 59, 500_000_000, loc))
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, d)
}
