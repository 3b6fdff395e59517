package autorecovery

import "errors"

// Errors returned by the package. Test with errors.Is.
var (
	// ErrInvalidArgument: bad configuration or input; the text names the
	// field and the limit. Nothing was changed.
	ErrInvalidArgument = errors.New("autorecovery: invalid argument")
	// ErrNoReplica: no surviving replica could provide an entry the lost
	// bookie held; the ledger stays marked and is retried later.
	ErrNoReplica = errors.New("autorecovery: no replica of entry")
	// ErrPaused: autorecovery was paused while a ledger was being
	// processed; its mark stays and is taken up after Resume.
	ErrPaused = errors.New("autorecovery: paused")
	// ErrClosed: the Auditor or Worker was closed.
	ErrClosed = errors.New("autorecovery: closed")
)
