package bookie

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stable reason strings: every bookie error's gRPC status message starts with
// one of these (see api/bookie/v1/bookie.proto). They never change.
const (
	ReasonFenced          = "ledger fenced"
	ReasonNoSuchLedger    = "no such ledger"
	ReasonNoSuchEntry     = "no such entry"
	ReasonCorrupt         = "entry corrupt"
	ReasonReadOnly        = "bookie read-only"
	ReasonStopping        = "bookie stopping"
	ReasonInvalidArgument = "invalid argument"
	ReasonTooManyInFlight = "too many in flight"
	ReasonIO              = "io error"
	ReasonWrongBookie     = "wrong bookie"
	ReasonLedgerUnknown   = "ledger unknown"
)

// Errors returned by the bookie (locally) and by FromStatus (for errors that
// came over gRPC). Test with errors.Is.
var (
	// ErrLedgerFenced: the ledger is fenced; a normal add was refused.
	ErrLedgerFenced = errors.New("bookie: " + ReasonFenced)
	// ErrNoSuchLedger: the bookie holds nothing of the ledger.
	ErrNoSuchLedger = errors.New("bookie: " + ReasonNoSuchLedger)
	// ErrNoSuchEntry: the ledger is known but this entry is not stored here.
	// Use IsNotFound to test for either ErrNoSuchLedger or ErrNoSuchEntry.
	ErrNoSuchEntry = errors.New("bookie: " + ReasonNoSuchEntry)
	// ErrEntryCorrupt: the entry is stored but fails its CRC32C check. It is
	// NOT "missing": recovery must not treat it as absent.
	ErrEntryCorrupt = errors.New("bookie: " + ReasonCorrupt)
	// ErrReadOnly: the bookie refuses adds (disk over threshold, I/O or
	// fsync error). Reads still work.
	ErrReadOnly = errors.New("bookie: " + ReasonReadOnly)
	// ErrStopping: the bookie is shutting down.
	ErrStopping = errors.New("bookie: " + ReasonStopping)
	// ErrInvalidArgument: bad input; the message names the field and limit.
	ErrInvalidArgument = errors.New("bookie: " + ReasonInvalidArgument)
	// ErrTooManyInFlight: the bookie's bounded add queue is full.
	ErrTooManyInFlight = errors.New("bookie: " + ReasonTooManyInFlight)
	// ErrIO: a disk operation failed; for an add, the entry was not
	// acknowledged (it may or may not be on disk, but it was never acked).
	ErrIO = errors.New("bookie: " + ReasonIO)
	// ErrWrongBookie: the request named another bookie ID or instance than
	// this one; nothing was done. The caller reached another process (or a
	// re-formatted bookie) at the address it used.
	ErrWrongBookie = errors.New("bookie: " + ReasonWrongBookie)
	// ErrLedgerUnknown: the bookie was re-formatted and is in limbo for the
	// ledger: it does not hold what was asked and cannot tell whether its
	// previous instance did. NOT "missing": recovery must not treat it as
	// absent.
	ErrLedgerUnknown = errors.New("bookie: " + ReasonLedgerUnknown)
)

type errClass struct {
	err    error
	code   codes.Code
	reason string
}

var classes = []errClass{
	{ErrLedgerFenced, codes.FailedPrecondition, ReasonFenced},
	{ErrNoSuchLedger, codes.NotFound, ReasonNoSuchLedger},
	{ErrNoSuchEntry, codes.NotFound, ReasonNoSuchEntry},
	{ErrEntryCorrupt, codes.DataLoss, ReasonCorrupt},
	{ErrReadOnly, codes.Unavailable, ReasonReadOnly},
	{ErrStopping, codes.Unavailable, ReasonStopping},
	{ErrInvalidArgument, codes.InvalidArgument, ReasonInvalidArgument},
	{ErrTooManyInFlight, codes.ResourceExhausted, ReasonTooManyInFlight},
	{ErrIO, codes.Internal, ReasonIO},
	{ErrWrongBookie, codes.FailedPrecondition, ReasonWrongBookie},
	{ErrLedgerUnknown, codes.Unavailable, ReasonLedgerUnknown},
}

// IsNotFound reports whether err is ErrNoSuchLedger or ErrNoSuchEntry: the
// bookie positively does not store the entry (as opposed to corrupt or
// unreachable).
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNoSuchEntry) || errors.Is(err, ErrNoSuchLedger)
}

// ToStatus converts a bookie error to the gRPC code and message sent on the
// wire: the message starts with the stable reason, then ": detail".
// Context errors map to Canceled / DeadlineExceeded; anything else to
// INTERNAL "io error".
func ToStatus(err error) (codes.Code, string) {
	if err == nil {
		return codes.OK, ""
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			detail := strings.TrimPrefix(err.Error(), c.err.Error())
			detail = strings.TrimPrefix(detail, ": ")
			if detail == "" {
				return c.code, c.reason
			}
			return c.code, c.reason + ": " + detail
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error()
	}
	return codes.Internal, ReasonIO + ": " + err.Error()
}

// GRPCError converts a bookie error to a gRPC status error (nil for nil).
func GRPCError(err error) error {
	if err == nil {
		return nil
	}
	c, m := ToStatus(err)
	return status.Error(c, m)
}

// FromCode maps a code and message (as in AddEntryResponse) back to a bookie
// error that matches the sentinels with errors.Is; the message is kept as
// detail. codes.OK yields nil. Unknown combinations are returned as a plain
// error carrying the code, matching no sentinel (treat as "outcome unknown").
func FromCode(code codes.Code, msg string) error {
	if code == codes.OK {
		return nil
	}
	for _, c := range classes {
		if c.code == code && strings.HasPrefix(msg, c.reason) {
			detail := strings.TrimPrefix(strings.TrimPrefix(msg, c.reason), ": ")
			if detail == "" {
				return c.err
			}
			return fmt.Errorf("%w: %s", c.err, detail)
		}
	}
	switch code {
	case codes.Canceled:
		return fmt.Errorf("bookie: rpc canceled: %s: %w", msg, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("bookie: rpc deadline: %s: %w", msg, context.DeadlineExceeded)
	}
	return fmt.Errorf("bookie: rpc failed: %s: %s", code, msg)
}

// FromStatus maps an error returned by a bookie gRPC call back to the
// sentinels above (errors.Is works on the result). Errors that are not gRPC
// statuses are returned unchanged; transport failures (UNAVAILABLE without a
// bookie reason, etc.) match no sentinel.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return FromCode(st.Code(), st.Message())
}
