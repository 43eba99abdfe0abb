// Package obs holds what the packages that report ratesem.Events share.
package obs

import (
	"context"
	"errors"

	"github.com/ratesem/ratesem"
)

// FailKind tells the end of a failed Acquire: ratesem.Cancelled when err is
// the context's (canceled, or its deadline passed), ratesem.Refused
// otherwise, ErrDeadline's early refusal included (it matches
// context.DeadlineExceeded too).
func FailKind(err error) ratesem.EventKind {
	if !errors.Is(err, ratesem.ErrDeadline) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return ratesem.Cancelled
	}
	return ratesem.Refused
}
