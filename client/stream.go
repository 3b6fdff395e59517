package client

import (
	"context"
	"fmt"
	"time"
)

// recvFirst waits for a stream's first response (the open or subscribe
// answer). The wait is bounded by timeout rather than by the stream's own
// context, which lives as long as the stream. what names the operation in
// the error ("open producer on T"), addr the broker.
func recvFirst[T any](ctx context.Context, recv func() (T, error), timeout time.Duration, what, addr string) (T, error) {
	type recvd struct {
		r   T
		err error
	}
	ch := make(chan recvd, 1)
	go func() { r, err := recv(); ch <- recvd{r, err} }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var zero T
	select {
	case rv := <-ch:
		if rv.err != nil {
			return zero, mapError(rv.err)
		}
		return rv.r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-timer.C:
		return zero, fmt.Errorf("%w: %s: no answer from %s within %v", ErrUnavailable, what, addr, timeout)
	}
}
