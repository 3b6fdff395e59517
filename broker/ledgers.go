package broker

import "context"

// LedgerStore is what the broker needs from the ledger client
// (bookie/ledger.Client satisfies it through NewLedgerStore). All methods
// are safe for concurrent use.
type LedgerStore interface {
	// Create opens a new ledger for writing.
	Create(ctx context.Context, opts LedgerOptions) (LedgerWriter, error)
	// Open opens a ledger for reading without fencing it.
	Open(ctx context.Context, id int64) (LedgerReader, error)
	// OpenRecover fences the ledger, recovers its last entry and closes it:
	// after it returns, the previous writer can add nothing more.
	OpenRecover(ctx context.Context, id int64) (LedgerReader, error)
	// Delete deletes the ledger from its bookies and its metadata.
	Delete(ctx context.Context, id int64) error
}

// LedgerOptions are the ledger's replication settings and properties.
type LedgerOptions struct {
	Ensemble, WriteQuorum, AckQuorum int
	Properties                       map[string]string
}

// LedgerWriter is a ledger open for writing.
type LedgerWriter interface {
	ID() int64
	// AppendAsync adds data; cb runs once, in entry order, after the entry
	// is durable on AckQuorum bookies or failed. It blocks while the
	// in-flight window is full.
	AppendAsync(data []byte, cb func(entryID int64, err error))
	LastAddConfirmed() int64
	// Close waits for in-flight adds and closes the ledger.
	Close(ctx context.Context) error
}

// LedgerReader reads a ledger.
type LedgerReader interface {
	ID() int64
	// Read returns entries first..last inclusive. When an entry cannot be
	// read it returns the entries before it together with the error.
	Read(ctx context.Context, first, last int64) ([]LedgerEntry, error)
	LastAddConfirmed() int64
	IsClosed() bool
	ReadLastAddConfirmed(ctx context.Context) (int64, error)
	Close() error
}

// LedgerEntry is one entry read from a ledger.
type LedgerEntry struct {
	LedgerID, EntryID int64
	Data              []byte
}
