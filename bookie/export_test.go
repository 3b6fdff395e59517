package bookie

import (
	"context"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/internal/budget"
)

// EncodeRecordForTest encodes a journal record as the journal writes it, so
// tests can plant records inside user payloads.
func EncodeRecordForTest(typ byte, ledger, entry, lac int64, payload []byte) []byte {
	return encodeRecord(nil, typ, ledger, entry, lac, payload)
}

// Journal record types, for tests.
const (
	RecEntryForTest  = recEntry
	RecFenceForTest  = recFence
	RecDeleteForTest = recDelete
)

// QueuedAddBytesForTest reports the journal queue's byte budget
// (max_queued_add_bytes): bytes held now, the most held at once, and how
// many adds wait for it.
func (s *Server) QueuedAddBytesForTest() (inUse, peak int64, waiting int) {
	return s.st.queued.InUse(), s.st.queued.Peak(), s.st.queued.Waiting()
}

// AddForTest runs one add through the path a stream takes (addAsync) and
// returns its result, or its refusal if ctx ends while it waits.
func (s *Server) AddForTest(ctx context.Context, r *bookiev1.AddEntryRequest) error {
	ch := make(chan error, 1)
	s.addAsync(ctx, r, func(err error) { ch <- err })
	return <-ch
}

// SetStreamBudgetHookForTest makes every new AddEntries stream pass its
// byte budget (max_inflight_add_bytes_per_stream) to f.
func SetStreamBudgetHookForTest(f func(*budget.Budget)) { testStreamBudgetHook = f }
