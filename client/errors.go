package client

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the client wrap one of these (test
// with errors.Is); errors from the broker are mapped from their gRPC status
// code and stable reason.
var (
	// ErrInvalidArgument: bad input (options, message IDs, flags); the
	// message names the field and the limit.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrInvalidName: a tenant, namespace, topic or subscription name
	// breaks the naming rules.
	ErrInvalidName = errors.New("client: invalid name")
	// ErrTopicNotFound: the topic does not exist (and is not auto-created).
	ErrTopicNotFound = errors.New("client: topic not found")
	// ErrNotFound: a tenant, namespace or subscription does not exist.
	ErrNotFound = errors.New("client: not found")
	// ErrAlreadyExists: the tenant, namespace, topic or subscription exists.
	ErrAlreadyExists = errors.New("client: already exists")
	// ErrMessageTooLarge: a message or batch exceeds the size limit.
	ErrMessageTooLarge = errors.New("client: message too large")
	// ErrProducerQueueFull: MaxPendingMessages are unresolved and
	// BlockIfQueueFull is false.
	ErrProducerQueueFull = errors.New("client: producer queue full")
	// ErrSendTimeout: the message was not acknowledged within SendTimeout.
	// It may still have been stored (unknown outcome).
	ErrSendTimeout = errors.New("client: send timeout")
	// ErrProducerClosed: the producer is closed.
	ErrProducerClosed = errors.New("client: producer closed")
	// ErrConsumerClosed: the consumer is closed.
	ErrConsumerClosed = errors.New("client: consumer closed")
	// ErrClientClosed: the client is closed.
	ErrClientClosed = errors.New("client: client closed")
	// ErrConsumerBusy: the subscription is Exclusive and has a consumer,
	// or the consumer's type does not match the subscription's.
	ErrConsumerBusy = errors.New("client: consumer busy")
	// ErrNotAllowed: the operation is refused in this state (for example a
	// cumulative ack on a Shared subscription, deleting a non-empty
	// namespace).
	ErrNotAllowed = errors.New("client: operation not allowed")
	// ErrUnavailable: no broker could serve the request before the
	// deadline (unreachable, shutting down, topic moving).
	ErrUnavailable = errors.New("client: service unavailable")
	// ErrQuotaExceeded: the topic refused the write because a backlog
	// quota or the replication lag bound is exceeded. It is retryable: the
	// producer resends with backoff within its SendTimeout, and reports the
	// quota (wrapped with ErrSendTimeout) if the timeout ends first.
	ErrQuotaExceeded = errors.New("client: quota exceeded")
	// ErrQuotaRefused: the replication lag bound (or the replication
	// backlog quota) with action producer_error refused the write. Unlike
	// ErrQuotaExceeded it is final, as Pulsar's producer_exception: the send
	// fails at once with the broker's reason ("replication lag to region b
	// is 6.9s, bound 2s") and is not resent. errors.Is(err,
	// ErrQuotaExceeded) holds for it too.
	ErrQuotaRefused = fmt.Errorf("%w (producer_error)", ErrQuotaExceeded)
	// ErrUnauthenticated: the broker refused the call's credentials (none
	// presented while the broker requires them, an expired or badly signed
	// token, a certificate of an unknown CA). Not retried.
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrPermissionDenied: the caller's role may not do this. It wraps
	// ErrNotAllowed.
	ErrPermissionDenied = fmt.Errorf("%w (permission denied)", ErrNotAllowed)
	// ErrProducerFenced: another producer with the same name took over.
	ErrProducerFenced = errors.New("client: producer fenced")
)
