package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridianmq/meridian/topology"
)

// Errors returned by the ledger client. Test with errors.Is.
var (
	// ErrLedgerFenced: the ledger was fenced (recovered or being recovered by
	// another client); this Writer can add nothing more.
	ErrLedgerFenced = errors.New("ledger: ledger fenced")
	// ErrLedgerClosed: the ledger (or the Writer/Reader/Client) is closed.
	ErrLedgerClosed = errors.New("ledger: ledger closed")
	// ErrNoSuchLedger: no metadata exists for the ledger ID.
	ErrNoSuchLedger = errors.New("ledger: no such ledger")
	// ErrNotEnoughBookies wraps topology.ErrNotEnoughBookies: too few live,
	// writable bookies to create a ledger or replace a failed one.
	ErrNotEnoughBookies = fmt.Errorf("ledger: %w", topology.ErrNotEnoughBookies)
	// ErrLedgerRecovering: recovery could not finish (too few bookies
	// answered to decide where the ledger ends); the ledger stays
	// in-recovery and OpenRecover can be retried later.
	ErrLedgerRecovering = errors.New("ledger: recovery incomplete, ledger still in recovery")
	// ErrNoSuchEntry: the entry is beyond the readable range or no replica
	// stores it.
	ErrNoSuchEntry = errors.New("ledger: no such entry")
	// ErrEntryCorrupt: every replica that answered reported the entry corrupt.
	ErrEntryCorrupt = errors.New("ledger: entry corrupt")
	// ErrReadFailed: no replica of an entry could be read (unreachable,
	// slow or failing bookies).
	ErrReadFailed = errors.New("ledger: read failed")
	// ErrInvalidArgument: bad input; the message names the field and limit.
	ErrInvalidArgument = errors.New("ledger: invalid argument")
)

// bookieErrKind classifies a bookie's answer. The reason strings are the
// stable prefixes documented in api/bookie/v1/bookie.proto, matched here
// directly. (This package imports package bookie only for its gRPC buffer
// pool, codec and batch limit; package bookie must not import this one.)
type bookieErrKind int

const (
	kindOK bookieErrKind = iota
	kindFenced
	kindNotFound
	kindCorrupt
	kindReadOnly
	kindInvalid
	kindBusy // back-pressure (RESOURCE_EXHAUSTED "too many in flight"): not added, retry
	// kindOther: unavailable, I/O error, timeout, "wrong bookie" (another
	// process or instance answered), "ledger unknown" (a re-formatted bookie
	// in limbo): outcome unknown, never absence.
	kindOther
)

// Stable bookie reason strings (see api/bookie/v1/bookie.proto).
const (
	reasonFenced       = "ledger fenced"
	reasonNoSuchLedger = "no such ledger"
	reasonNoSuchEntry  = "no such entry"
	reasonCorrupt      = "entry corrupt"
	reasonReadOnly     = "bookie read-only"
	reasonInvalid      = "invalid argument"
	reasonBusy         = "too many in flight"
)

func classifyCode(code codes.Code, msg string) bookieErrKind {
	switch {
	case code == codes.OK:
		return kindOK
	case code == codes.FailedPrecondition && strings.HasPrefix(msg, reasonFenced):
		return kindFenced
	case code == codes.NotFound && (strings.HasPrefix(msg, reasonNoSuchEntry) || strings.HasPrefix(msg, reasonNoSuchLedger)):
		return kindNotFound
	case code == codes.DataLoss && strings.HasPrefix(msg, reasonCorrupt):
		return kindCorrupt
	case code == codes.Unavailable && strings.HasPrefix(msg, reasonReadOnly):
		return kindReadOnly
	case code == codes.InvalidArgument && strings.HasPrefix(msg, reasonInvalid):
		return kindInvalid
	case code == codes.ResourceExhausted && strings.HasPrefix(msg, reasonBusy):
		return kindBusy
	}
	return kindOther
}

func classify(err error) bookieErrKind {
	if err == nil {
		return kindOK
	}
	var be *bookieError
	if errors.As(err, &be) {
		return classifyCode(be.code, be.msg)
	}
	if st, ok := status.FromError(err); ok {
		return classifyCode(st.Code(), st.Message())
	}
	return kindOther
}

// bookieError is a failed bookie operation: which bookie and its answer.
type bookieError struct {
	bookie string
	code   codes.Code
	msg    string
}

func (e *bookieError) Error() string {
	return fmt.Sprintf("bookie %s: %s: %s", e.bookie, e.code, e.msg)
}

// asBookieError wraps a gRPC error (or a context error) from bookie id.
func asBookieError(id string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &bookieError{bookie: id, code: codes.DeadlineExceeded, msg: err.Error()}
	}
	st, _ := status.FromError(err)
	return &bookieError{bookie: id, code: st.Code(), msg: st.Message()}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
