package broker

import (
	"context"
	"errors"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by the broker. Each maps to one clientv1.ErrorCode at the
// gRPC edge (see api/client/v1/client.proto). Test with errors.Is.
var (
	// ErrInvalidArgument: bad input; the text names the field and the limit.
	ErrInvalidArgument = errors.New("broker: invalid argument")
	// ErrTopicNotOwned: another broker owns the topic (redirect: Lookup).
	ErrTopicNotOwned = errors.New("broker: topic not owned here")
	// ErrMessageTooLarge: a send exceeds max_message_bytes.
	ErrMessageTooLarge = errors.New("broker: message too large")
	// ErrNotFound: tenant, namespace, topic or subscription missing.
	ErrNotFound = errors.New("broker: not found")
	// ErrAlreadyExists: a create of an existing object.
	ErrAlreadyExists = errors.New("broker: already exists")
	// ErrConsumerBusy: the Exclusive subscription (or consumer name) is taken.
	ErrConsumerBusy = errors.New("broker: consumer busy")
	// ErrTypeMismatch: the subscription is connected with another type.
	ErrTypeMismatch = errors.New("broker: subscription type mismatch")
	// ErrNotAllowed: the operation is not valid in this state.
	ErrNotAllowed = errors.New("broker: not allowed")
	// ErrProducerBusy: a producer with this name is connected to the topic.
	ErrProducerBusy = errors.New("broker: producer busy")
	// ErrStorage: a ledger operation failed; the send was not acknowledged.
	ErrStorage = errors.New("broker: storage error")
	// ErrUnavailable: transient (metadata, topic moving); retry.
	ErrUnavailable = errors.New("broker: unavailable")
	// ErrTopicFenced: another broker took the topic over (CAS mismatch).
	ErrTopicFenced = errors.New("broker: topic fenced: another broker took it over")
	// ErrQuotaExceeded: a backlog quota or the replication lag bound is
	// exceeded; retry once it clears.
	ErrQuotaExceeded = errors.New("broker: quota exceeded")
	// ErrQuotaRefused: the replication lag bound or the replication
	// backlog quota, with action producer_error, refused the send. The
	// refusal is final (ERROR_CODE_QUOTA_REFUSED): the client fails the
	// send at once instead of resending it. Wraps ErrQuotaExceeded.
	ErrQuotaRefused = fmt.Errorf("%w (producer_error)", ErrQuotaExceeded)
	// ErrServerStopping: the broker is shutting down.
	ErrServerStopping   = errors.New("broker: stopping")
	errInternalSentinel = errors.New("broker: internal")
)

// notOwnedError carries the owner's address for a redirect.
type notOwnedError struct{ owner string }

func (e *notOwnedError) Error() string {
	if e.owner == "" {
		return ErrTopicNotOwned.Error()
	}
	return fmt.Sprintf("%s: owner is %s", ErrTopicNotOwned, e.owner)
}
func (e *notOwnedError) Unwrap() error { return ErrTopicNotOwned }

type errMap struct {
	err   error
	code  clientv1.ErrorCode
	grpcC codes.Code
}

var errTable = []errMap{
	{ErrInvalidArgument, clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, codes.InvalidArgument},
	{ErrTopicNotOwned, clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED, codes.FailedPrecondition},
	{ErrMessageTooLarge, clientv1.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE, codes.InvalidArgument},
	{ErrNotFound, clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, codes.NotFound},
	{ErrAlreadyExists, clientv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, codes.AlreadyExists},
	{ErrConsumerBusy, clientv1.ErrorCode_ERROR_CODE_CONSUMER_BUSY, codes.FailedPrecondition},
	{ErrTypeMismatch, clientv1.ErrorCode_ERROR_CODE_SUBSCRIPTION_TYPE_MISMATCH, codes.FailedPrecondition},
	{ErrNotAllowed, clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED, codes.FailedPrecondition},
	{ErrProducerBusy, clientv1.ErrorCode_ERROR_CODE_PRODUCER_BUSY, codes.FailedPrecondition},
	{ErrLimitReached, clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED, codes.FailedPrecondition},
	// A metadata store limit (max_keys, max_total_bytes, max_sessions_per_client,
	// max_watches_per_client); the message names it.
	{metadata.ErrLimitExceeded, clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED, codes.ResourceExhausted},
	{ErrStorage, clientv1.ErrorCode_ERROR_CODE_STORAGE_ERROR, codes.Unavailable},
	{ErrTopicFenced, clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED, codes.FailedPrecondition},
	{ErrQuotaRefused, clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED, codes.ResourceExhausted},
	{ErrQuotaExceeded, clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED, codes.ResourceExhausted},
	// FromError maps a code back to the first entry with it: ErrUnavailable
	// must come before the other UNAVAILABLE causes.
	{ErrUnavailable, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Unavailable},
	{ErrServerStopping, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Unavailable},
	{metadata.ErrUnavailable, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Unavailable},
	{metadata.ErrUnknownOutcome, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Unavailable},
	{context.DeadlineExceeded, clientv1.ErrorCode_ERROR_CODE_TIMEOUT, codes.DeadlineExceeded},
	{context.Canceled, clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE, codes.Canceled},
}

// ToError classifies err as a clientv1.Error (nil for nil).
func ToError(err error) *clientv1.Error {
	if err == nil {
		return nil
	}
	e := &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_INTERNAL, Message: err.Error()}
	for _, m := range errTable {
		if errors.Is(err, m.err) {
			e.Code = m.code
			break
		}
	}
	var no *notOwnedError
	if errors.As(err, &no) {
		e.RedirectUrl = no.owner
	}
	return e
}

// grpcCode returns the gRPC code for err.
func grpcCode(err error) codes.Code {
	for _, m := range errTable {
		if errors.Is(err, m.err) {
			return m.grpcC
		}
	}
	return codes.Internal
}

// GRPCError converts a broker error to a gRPC status carrying a
// clientv1.Error in its details.
func GRPCError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isBrokerErr(err) {
		return err
	}
	st := status.New(grpcCode(err), err.Error())
	if d, derr := st.WithDetails(ToError(err)); derr == nil {
		st = d
	}
	return st.Err()
}

func isBrokerErr(err error) bool {
	for _, m := range errTable {
		if errors.Is(err, m.err) {
			return true
		}
	}
	return false
}

// FromGRPC maps a status produced by GRPCError back to a broker sentinel
// (errors.Is works), used by brokers forwarding requests to each other.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if e, ok := d.(*clientv1.Error); ok {
			return FromError(e)
		}
	}
	if st.Code() == codes.Unavailable {
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Message())
	}
	return err
}

// FromError maps a clientv1.Error back to a broker sentinel.
func FromError(e *clientv1.Error) error {
	if e == nil {
		return nil
	}
	for _, m := range errTable {
		if m.code == e.Code {
			if m.code == clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED {
				return &notOwnedError{owner: e.RedirectUrl}
			}
			return fmt.Errorf("%w: %s", m.err, e.Message)
		}
	}
	return fmt.Errorf("%w: %s", errInternalSentinel, e.Message)
}
