package bookie

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
