package httpclient_test

import "testing"

// TestHrevFastSamplesPushOutSlow: the times to a response are kept per
// host. A Transport shared by a near host and a far one (an account whose
// API has two hosts, or a NewPool Transport for several APIs) learns the
// far one's latency, then sends 64 requests to the near one: with one ring
// per Transport, the far host's samples are gone and its cancelled
// requests are held twice the near host's latency only, far less than
// their 50 ms on the wire (22 of 506 arrivals over the limit in a run).
func TestHrevFastSamplesPushOutSlow(t *testing.T) { cancelStorm(t, 100, 64) }
