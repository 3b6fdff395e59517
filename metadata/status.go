package metadata

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stable gRPC status reasons: a status message starts with "<reason>: ".
var statusReasons = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrNotFound, codes.NotFound, "not found"},
	{ErrVersionMismatch, codes.Aborted, "version mismatch"},
	{ErrSessionExpired, codes.FailedPrecondition, "session expired"},
	{ErrCompacted, codes.OutOfRange, "compacted"},
	{ErrInvalidArgument, codes.InvalidArgument, "invalid argument"},
	{ErrLimitExceeded, codes.ResourceExhausted, "limit exceeded"},
	{ErrUnavailable, codes.Unavailable, "unavailable"},
	{ErrUnknownOutcome, codes.Unknown, "outcome unknown"},
}

// ToStatus converts a Store error to a gRPC status error with a stable
// reason (see api/metadata/v1/metadata.proto).
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinel(err) {
		return err
	}
	for _, r := range statusReasons {
		if errors.Is(err, r.err) {
			detail := strings.TrimPrefix(err.Error(), r.err.Error())
			detail = strings.TrimPrefix(detail, ": ")
			return status.Error(r.code, r.reason+": "+detail)
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func isSentinel(err error) bool {
	for _, r := range statusReasons {
		if errors.Is(err, r.err) {
			return true
		}
	}
	return false
}

// FromStatus converts a gRPC status error made by ToStatus back to an error
// that matches the metadata sentinels with errors.Is. Other errors
// (transport failures, deadlines, foreign statuses) are returned unchanged.
func FromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, r := range statusReasons {
		if st.Code() == r.code && strings.HasPrefix(st.Message(), r.reason+": ") {
			return &remoteError{sentinel: r.err, msg: strings.TrimPrefix(st.Message(), r.reason+": ")}
		}
	}
	return err
}

// remoteError is a sentinel error that came over the wire.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string {
	if e.msg == "" {
		return e.sentinel.Error()
	}
	return e.sentinel.Error() + ": " + e.msg
}

func (e *remoteError) Unwrap() error { return e.sentinel }
