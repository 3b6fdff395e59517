package metadata

import (
	"encoding/json"
	"fmt"
)

// Commands are the Raft log entries of a shard. They are JSON so that a log or
// snapshot can be read by eye when debugging; the state machine is the only
// reader. Every command carries the proposer's wall-clock time (Now, Unix
// nanoseconds): it is the only source of time inside the state machine. Only
// ticks, proposed by a shard leader, move the session clock; the time of
// other commands is bounded by it (see stateMachine.proposerTime), so a
// proposer whose clock runs fast cannot expire other sessions early.
const (
	cmdTxn          = "txn"   // Put, Delete and Txn
	cmdCreateSess   = "csess" // CreateSession
	cmdKeepAlive    = "keep"  // KeepAlive
	cmdCloseSession = "close" // CloseSession
	cmdTick         = "tick"  // leader's clock: expire sessions
)

// command is one proposal.
type command struct {
	Type    string  `json:"t"`
	Now     int64   `json:"n"`
	Ops     []cmdOp `json:"o,omitempty"`
	TTL     int64   `json:"ttl,omitempty"`
	Session uint64  `json:"s,omitempty"`
	// Renew, on a tick, extends every session to at least now+TTL: a new
	// leader proposes it first so that sessions do not expire because no
	// leader could receive their keep-alives during an election.
	Renew bool `json:"r,omitempty"`
	// MaxSkew (ns), on a tick, is the leader's max_clock_skew: how far
	// after the session clock other commands' times may fall.
	MaxSkew int64 `json:"k,omitempty"`
	// MaxKeys and MaxBytes, on a txn, are the proposer's max_keys and
	// max_total_bytes (0: unlimited, as in commands written before them).
	// The limits travel in the command so that every replica decides alike.
	MaxKeys  int64 `json:"mk,omitempty"`
	MaxBytes int64 `json:"mb,omitempty"`
	// Client and MaxSessions, on a csess, are the client the session is
	// counted against ("" = none) and the proposer's max_sessions_per_client
	// (0: unlimited).
	Client      string `json:"c,omitempty"`
	MaxSessions int64  `json:"ms,omitempty"`
}

// cmdOp is one transaction operation inside a command.
type cmdOp struct {
	Type     OpType `json:"t"`
	Key      string `json:"k"`
	Value    []byte `json:"v,omitempty"`
	Expected int64  `json:"e,omitempty"`
	Session  uint64 `json:"s,omitempty"`
}

// Result codes carried in sm.Result.Value. Update never returns an error
// (Dragonboat treats that as fatal); failures travel as codes.
const (
	codeOK uint64 = iota
	codeNotFound
	codeVersionMismatch
	codeSessionExpired
	codeInvalid
	codeLimitExceeded
)

// cmdResult is the Data of an sm.Result.
type cmdResult struct {
	KVs     []KV   `json:"kvs,omitempty"`
	Session uint64 `json:"s,omitempty"`
	// Expired counts sessions a tick expired (for metrics).
	Expired int    `json:"x,omitempty"`
	Msg     string `json:"m,omitempty"`
}

func encodeResult(r cmdResult) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// Only plain data types are marshalled; this cannot happen.
		panic(fmt.Sprintf("metadata: encode result: %v", err))
	}
	return b
}

// codeError turns a result code and message into the package's sentinel errors.
func codeError(code uint64, msg string) error {
	switch code {
	case codeOK:
		return nil
	case codeNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, msg)
	case codeVersionMismatch:
		return fmt.Errorf("%w: %s", ErrVersionMismatch, msg)
	case codeSessionExpired:
		return fmt.Errorf("%w: %s", ErrSessionExpired, msg)
	case codeLimitExceeded:
		return fmt.Errorf("%w: %s", ErrLimitExceeded, msg)
	default:
		return fmt.Errorf("%w: %s", ErrInvalidArgument, msg)
	}
}
