package broker

import (
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Local origin sequence numbers.
//
// A region's own entries carry origin_seq = 1, 2, 3, ... counting only the
// entries produced in this region (replicated entries from other regions
// do not take numbers). The numbers are contiguous per origin, which is
// what lets a receiver tell a relayed entry that follows the last one it
// applied from one that skips some (GAP, see replapply.go): a position
// based offset would count the other regions' entries interleaved in the
// origin's log and make every relayed entry look like a gap.
//
// The append loop assigns the number (one goroutine, in log order) and
// writes it into the stored entry's metadata; the ledger list keeps the
// last number as of its dedup snapshot (LocalSeq) and a takeover scan of
// the later ledgers finds the rest. Topics written before local numbers
// existed start numbering after their entry count, so that a new number is
// above every position-derived one shipped before.
//
// The numbers are per origin incarnation (originstream.go): a new ledger
// list takes a new incarnation from the global shard and numbers from 1
// again, and the pair never repeats.

// initLocalSeq returns the last local number as of the ledger list's
// snapshot (before the takeover scan of later ledgers).
func initLocalSeq(rec *mlRecord) int64 {
	if rec.LocalSeqKnown {
		return rec.LocalSeq
	}
	n := rec.TrimmedEntries
	for _, li := range rec.Ledgers {
		n += max(li.Entries, 0)
	}
	return n
}

// observeLocalSeq raises cur to a scanned local entry's number (only
// numbers of the list's own incarnation inc count).
func observeLocalSeq(cur int64, inc uint64, md *clientv1.EntryMetadata) int64 {
	if !md.GetReplicated() && md.GetOriginIncarnation() == inc && md.GetOriginSeq() > cur {
		return md.GetOriginSeq()
	}
	return cur
}

// assignLocalSeq gives a locally produced entry the next local number and
// encodes it (a request that came encoded is decoded and re-encoded: the
// payload bytes are copied, not changed).
// Called by the append loop only: it alone moves localSeq, so the copy is
// made without holding ml.mu.
func (ml *managedLedger) assignLocalSeq(r *appendReq) error {
	md, payload := r.md, r.payload
	if md == nil {
		var err error
		if md, payload, err = wire.DecodeEntry(r.data); err != nil {
			return fmt.Errorf("%w: entry to append is not decodable: %v", ErrInvalidArgument, err)
		}
	}
	ml.mu.Lock()
	seq, inc := ml.localSeq+1, ml.incarnation
	ml.mu.Unlock()
	md.OriginSeq, md.OriginIncarnation = seq, inc
	data, err := wire.EncodeEntry(md, payload)
	if err != nil {
		return fmt.Errorf("%w: re-encode entry: %v", ErrInvalidArgument, err)
	}
	ml.mu.Lock()
	ml.localSeq = seq
	ml.mu.Unlock()
	r.data, r.md, r.payload = data, nil, nil
	return nil
}
