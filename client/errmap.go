package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errTopicNotOwned: the broker does not own the topic; look it up again.
var errTopicNotOwned = errors.New("client: topic not owned by this broker")

// errProducerBusy: a producer with this name is connected to the topic.
var errProducerBusy = errors.New("client: producer name in use")

// ServerError is a classified error reported by a broker. It unwraps to
// the matching sentinel (ErrTopicNotFound, ErrMessageTooLarge, ...).
type ServerError struct {
	// Reason is the broker's stable error code name, e.g. "MESSAGE_TOO_LARGE".
	Reason string
	// Message is the broker's explanation (names the field and the limit).
	Message string
	// RedirectURL is the owner's address for a TOPIC_NOT_OWNED answer.
	RedirectURL string
	kind        error
}

// Error returns "<sentinel>: <broker message>".
func (e *ServerError) Error() string {
	if e.Message == "" {
		return e.kind.Error()
	}
	return e.kind.Error() + ": " + e.Message
}

// Unwrap returns the sentinel.
func (e *ServerError) Unwrap() error { return e.kind }

// errorFromProto maps a broker Error to a *ServerError.
func errorFromProto(e *clientv1.Error) error {
	if e == nil {
		return nil
	}
	kind := ErrUnavailable
	switch e.GetCode() {
	case clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		kind = ErrInvalidArgument
		if looksLikeName(e.GetMessage()) {
			kind = ErrInvalidName
		}
	case clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED:
		kind = errTopicNotOwned
	case clientv1.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE:
		kind = ErrMessageTooLarge
	case clientv1.ErrorCode_ERROR_CODE_NOT_FOUND:
		kind = ErrNotFound
		if strings.Contains(strings.ToLower(e.GetMessage()), "topic") {
			kind = ErrTopicNotFound
		}
	case clientv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS:
		kind = ErrAlreadyExists
	case clientv1.ErrorCode_ERROR_CODE_CONSUMER_BUSY, clientv1.ErrorCode_ERROR_CODE_SUBSCRIPTION_TYPE_MISMATCH:
		kind = ErrConsumerBusy
	case clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED:
		kind = ErrNotAllowed
	case clientv1.ErrorCode_ERROR_CODE_PRODUCER_BUSY:
		kind = errProducerBusy
	case clientv1.ErrorCode_ERROR_CODE_STORAGE_ERROR, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE,
		clientv1.ErrorCode_ERROR_CODE_TIMEOUT:
		kind = ErrUnavailable
	case clientv1.ErrorCode_ERROR_CODE_INTERNAL:
		kind = errInternal
	case clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED:
		kind = ErrQuotaExceeded
	case clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED:
		kind = ErrQuotaRefused
	}
	return &ServerError{
		Reason:      strings.TrimPrefix(e.GetCode().String(), "ERROR_CODE_"),
		Message:     e.GetMessage(),
		RedirectURL: e.GetRedirectUrl(),
		kind:        kind,
	}
}

// errInternal: the broker reported a bug.
var errInternal = errors.New("client: broker internal error")

// looksLikeName tells an invalid-name message from other invalid input.
func looksLikeName(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "name") || strings.Contains(m, "tenant") ||
		strings.Contains(m, "namespace") || strings.Contains(m, "topic")
}

// mapError converts a gRPC error into the client's error vocabulary:
// a *ServerError when the status carries a meridian Error detail, else a
// sentinel chosen by status code. Context errors pass through.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *ServerError
	if errors.As(err, &se) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, d := range st.Details() {
		if e, ok := d.(*clientv1.Error); ok {
			return errorFromProto(e)
		}
	}
	var kind error
	switch st.Code() {
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, st.Message())
	case codes.InvalidArgument:
		kind = ErrInvalidArgument
	case codes.NotFound:
		kind = ErrNotFound
	case codes.AlreadyExists:
		kind = ErrAlreadyExists
	case codes.FailedPrecondition:
		kind = ErrNotAllowed
	case codes.PermissionDenied:
		kind = ErrPermissionDenied
	case codes.Unauthenticated:
		kind = ErrUnauthenticated
	case codes.ResourceExhausted:
		switch {
		case strings.Contains(st.Message(), "larger than max"):
			kind = ErrMessageTooLarge
		case strings.Contains(st.Message(), "quota"):
			kind = ErrQuotaExceeded
		default:
			kind = ErrUnavailable
		}
	case codes.Internal, codes.Unknown, codes.DataLoss:
		kind = errInternal
	default: // Unavailable, Aborted, Unimplemented (not yet serving)...
		kind = ErrUnavailable
	}
	return fmt.Errorf("%w: %s", kind, st.Message())
}

// retryable reports errors a reconnect (with a new lookup) may cure.
func retryable(err error) bool {
	if errors.Is(err, ErrQuotaRefused) {
		return false // producer_error: final, fails the send at once
	}
	// A deadline here is a per-attempt timeout; the retry loops check the
	// caller's own context separately.
	return errors.Is(err, ErrUnavailable) || errors.Is(err, errTopicNotOwned) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrQuotaExceeded)
}

// transientAfterOpen reports errors that are expected right after a
// broker crash or move and pass once the old session is gone: the broker
// may still hold the previous stream of the same producer or exclusive
// consumer for a moment.
func transientAfterOpen(err error) bool {
	return errors.Is(err, errProducerBusy) || errors.Is(err, ErrConsumerBusy)
}

// userError strips client-internal sentinels the caller cannot act on.
func userError(err error) error {
	switch {
	case errors.Is(err, errTopicNotOwned):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case errors.Is(err, errProducerBusy):
		return fmt.Errorf("%w: %v", ErrNotAllowed, err)
	}
	return err
}
