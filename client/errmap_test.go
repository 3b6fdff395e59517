package client

import (
	"context"
	"errors"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func statusWith(code codes.Code, e *clientv1.Error) error {
	st := status.New(code, e.GetMessage())
	st, err := st.WithDetails(e)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestMapErrorUsesDetailCode(t *testing.T) {
	cases := []struct {
		code codes.Code
		e    *clientv1.Error
		want error
	}{
		{codes.InvalidArgument, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE, Message: "batch is 6291456 bytes, limit 5242880"}, ErrMessageTooLarge},
		{codes.InvalidArgument, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "topic name \"a b\": invalid character"}, ErrInvalidName},
		{codes.NotFound, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, Message: "topic public/default/x not found"}, ErrTopicNotFound},
		{codes.NotFound, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, Message: "namespace x/y does not exist"}, ErrNotFound},
		{codes.FailedPrecondition, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_CONSUMER_BUSY, Message: "exclusive"}, ErrConsumerBusy},
		{codes.FailedPrecondition, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED, Message: "cumulative ack on shared"}, ErrNotAllowed},
		{codes.Unavailable, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_STORAGE_ERROR, Message: "bookie"}, ErrUnavailable},
		{codes.FailedPrecondition, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED, RedirectUrl: "127.0.0.1:1"}, errTopicNotOwned},
	}
	for _, c := range cases {
		err := mapError(statusWith(c.code, c.e))
		if !errors.Is(err, c.want) {
			t.Errorf("%v: got %v, want %v", c.e.Code, err, c.want)
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Message != c.e.Message {
			t.Errorf("%v: not a ServerError with the broker message: %v", c.e.Code, err)
		}
	}
	if !retryable(mapError(statusWith(codes.FailedPrecondition, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_TOPIC_NOT_OWNED}))) {
		t.Error("TOPIC_NOT_OWNED must be retryable")
	}
	if retryable(mapError(statusWith(codes.InvalidArgument, &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE}))) {
		t.Error("MESSAGE_TOO_LARGE must not be retryable")
	}
}

func TestMapErrorByCode(t *testing.T) {
	if err := mapError(status.Error(codes.Unavailable, "connection refused")); !errors.Is(err, ErrUnavailable) || !retryable(err) {
		t.Fatal(err)
	}
	if err := mapError(status.Error(codes.ResourceExhausted, "grpc: received message larger than max (7 vs. 4)")); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatal(err)
	}
	if err := mapError(status.Error(codes.Canceled, "x")); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := mapError(errors.New("boom")); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
}
