package metadata

import (
	"context"
	"errors"
	"time"
)

// Version guards for Put and Delete.
const (
	// AnyVersion applies the change whatever the key's current version.
	AnyVersion int64 = 0
	// MustNotExist makes a Put succeed only if the key does not exist.
	MustNotExist int64 = -1
)

// Errors returned by Store implementations. Test with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("metadata: key not found")
	// ErrVersionMismatch: a compare-and-set guard failed; nothing was applied.
	ErrVersionMismatch = errors.New("metadata: version mismatch")
	// ErrUnknownOutcome: the change may or may not have been applied
	// (timeout or connection loss after the proposal was sent). Re-read
	// before acting.
	ErrUnknownOutcome = errors.New("metadata: outcome unknown")
	// ErrSessionExpired: the session is closed or expired.
	ErrSessionExpired = errors.New("metadata: session expired")
	// ErrCompacted: a watch asked for a revision older than the retained history.
	ErrCompacted = errors.New("metadata: revision compacted")
	// ErrInvalidArgument: bad input (empty or oversize key or value, unknown
	// shard, bad page size); the error text names the field and the limit.
	ErrInvalidArgument = errors.New("metadata: invalid argument")
	// ErrLimitExceeded: a configured limit (max_keys, max_total_bytes,
	// max_sessions_per_client, max_watches_per_client) refused the request;
	// nothing was applied. The error text names the field and its value.
	// Deleting keys or closing sessions and watches makes room.
	ErrLimitExceeded = errors.New("metadata: limit exceeded")
	// ErrUnavailable: no quorum or no reachable endpoint; nothing was applied.
	ErrUnavailable = errors.New("metadata: unavailable")
)

// SessionID identifies a session; 0 means none.
type SessionID uint64

// KV is one stored key.
type KV struct {
	Key   string
	Value []byte
	// Version is 1 after creation and grows by one on every Put.
	Version int64
	// CreateRevision and ModRevision are shard revisions of creation and
	// of the last change.
	CreateRevision int64
	ModRevision    int64
	// Session is the session the key is ephemeral to, 0 if persistent.
	Session SessionID
}

// EventType says what happened to a key.
type EventType int

const (
	// EventPut is a create or an update.
	EventPut EventType = iota + 1
	// EventDelete is an explicit delete or the expiry of an ephemeral key.
	EventDelete
)

// Event is one change seen by a watch.
type Event struct {
	Type     EventType
	Revision int64
	// KV is the key after the change; for deletes, Value is nil and Key is set.
	KV KV
}

// ReadOptions tune a read.
type ReadOptions struct {
	// Stale reads the local replica without a ReadIndex round; it may be
	// behind but works without quorum.
	Stale bool
}

// Page asks for one page of a List.
type Page struct {
	// After lists keys strictly greater than this key ("" = from the start).
	After string
	// Limit caps the keys returned (0 = the store's default page size).
	Limit int
}

// ListResult is one page of a List.
type ListResult struct {
	KVs []KV
	// More is true when keys after the last one returned remain.
	More bool
	// Revision is the shard revision the page was read at.
	Revision int64
}

// OpType names a transaction operation.
type OpType int

const (
	// OpPut writes Key=Value if the version guard holds.
	OpPut OpType = iota + 1
	// OpDelete deletes Key if the version guard holds.
	OpDelete
	// OpCheck only checks the version guard.
	OpCheck
)

// Op is one operation of a transaction; every guard must hold or nothing applies.
type Op struct {
	Type            OpType
	Key             string
	Value           []byte
	ExpectedVersion int64
	Session         SessionID
}

// Store is one metadata shard (the global shard or a region's shard).
//
// All methods are safe for concurrent use. Writes that fail with
// ErrUnknownOutcome may have been applied; every other error means nothing
// was applied. Returned slices belong to the caller.
type Store interface {
	// Get returns the key or ErrNotFound.
	Get(ctx context.Context, key string, opts ReadOptions) (KV, error)
	// Put writes the key if expectedVersion holds (AnyVersion, MustNotExist
	// or the exact current version) and returns the stored KV. A non-zero
	// session makes the key ephemeral to that session.
	Put(ctx context.Context, key string, value []byte, expectedVersion int64, session SessionID) (KV, error)
	// Delete removes the key if expectedVersion holds; ErrNotFound if absent.
	Delete(ctx context.Context, key string, expectedVersion int64) error
	// List returns keys with the prefix in key order, one page at a time.
	List(ctx context.Context, prefix string, page Page, opts ReadOptions) (ListResult, error)
	// Txn applies all ops atomically if every guard holds; on a failed guard
	// it returns ErrVersionMismatch naming the key, and applies nothing.
	Txn(ctx context.Context, ops []Op) ([]KV, error)
	// Watch delivers every change to keys with the prefix with a revision
	// greater than afterRevision, in revision order, exactly once, until ctx
	// ends or an error occurs; the error (nil after ctx ends) is sent on the
	// returned error channel after the event channel is closed.
	// Every key change has its own revision (a transaction of n changes
	// uses n consecutive revisions), so resuming after the last revision
	// seen never skips or repeats a change. A revision older than the
	// retained history ends the watch with ErrCompacted: List, then watch
	// after the list's Revision.
	Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan Event, <-chan error)
	// CreateSession opens a session that expires ttl after its last keep-alive.
	CreateSession(ctx context.Context, ttl time.Duration) (SessionID, error)
	// KeepAlive extends a session; ErrSessionExpired if it already ended.
	KeepAlive(ctx context.Context, id SessionID) error
	// CloseSession ends a session and deletes its ephemeral keys.
	CloseSession(ctx context.Context, id SessionID) error
}
