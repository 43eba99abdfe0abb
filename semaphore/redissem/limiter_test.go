package redissem_test

import (
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore/redissem"
)

// A Semaphore shared through Redis plugs into the RoundTripper as it is:
// httpclient.New(sem, nil) limits an http.Client across every replica.
var _ httpclient.Limiter = (*redissem.Semaphore)(nil)
