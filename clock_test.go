package ratesem_test

import (
	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem"
)

// A *clock.Mock is a ratesem.Clock as it is (the project's tests use it).
var _ ratesem.Clock = clock.NewMock()
