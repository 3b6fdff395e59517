package broker

import (
	"fmt"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// ReplDedupPrefix starts the dedup pseudo-producer names of replicated
// entries: "meridian.repl.<origin stream>" (originStreamKey: the region,
// or region@incarnation), with sequence = origin_seq. The
// names are pinned in the dedup table (never evicted, always in the
// snapshot) and refused as producer names. The replicators' cursors use
// the same prefix ("meridian.repl.<remote region>").
const ReplDedupPrefix = "meridian.repl."

// replDedupName is the dedup pseudo-producer of origin stream key stream
// (originStreamKey).
func replDedupName(stream string) string { return ReplDedupPrefix + stream }

// entryStream is the origin stream key of an entry's origin fields.
func entryStream(md *clientv1.EntryMetadata) string {
	return originStreamKey(md.GetOriginRegion(), md.GetOriginIncarnation())
}

// isReplName reports whether name is a replication pseudo-producer (or a
// replicator cursor) name.
func isReplName(name string) bool { return strings.HasPrefix(name, ReplDedupPrefix) }

// dedupKey is the dedup state an entry feeds: its producer's batch
// [first, highest] (under its failover identity key when it has one), or for a replicated entry the pseudo-producer of its
// origin stream with first = highest = origin_seq. ok is false when the
// entry feeds none.
func dedupKey(md *clientv1.EntryMetadata) (name string, first, highest int64, ok bool) {
	if md.GetReplicated() {
		if md.GetOriginRegion() == "" || md.GetOriginSeq() <= 0 {
			return "", 0, 0, false
		}
		return replDedupName(entryStream(md)), md.GetOriginSeq(), md.GetOriginSeq(), true
	}
	if md.GetProducerName() == "" {
		return "", 0, 0, false
	}
	if name, first, hs, ok := entryIdent(md); ok {
		// A producer with a failover identity is deduplicated by its
		// identity key (ident_dedup.go, dedupName), not by its name.
		return name, first, hs, true
	}
	hs := md.GetHighestSequenceId()
	if hs < md.GetSequenceId() {
		hs = md.GetSequenceId() + int64(md.GetNumMessages()) - 1
	}
	return md.GetProducerName(), md.GetSequenceId(), hs, true
}

// originSeqLocked computes the origin_seq of the stored entry at p: 1 +
// the entries trimmed by retention + the entries of the earlier ledgers
// (in Seq order) + p.E. It is 1-based so that 0 (the proto3 default) means
// "not set": the first entry a topic ever stored has origin_seq 1, and each
// later entry one more. ok is false when p's ledger is no longer retained.
func (ml *managedLedger) originSeqLocked(p pos) (int64, bool) {
	seq, ok := ml.seqOf[p.L]
	if !ok || p.E < 0 {
		return 0, false
	}
	n := ml.rec.TrimmedEntries
	for i, li := range ml.rec.Ledgers {
		if li.Seq < seq {
			n += ml.countLocked(i)
		}
	}
	return n + p.E + 1, true
}

// originSeq returns the origin_seq of the local entry stored at p (see
// originSeqLocked); false when p's ledger was deleted by retention.
func (ml *managedLedger) originSeq(p pos) (int64, bool) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.originSeqLocked(p)
}

// shipForm returns the bytes a replicator ships for entry e of this topic
// (read from its managed ledger) and their metadata. A local entry (not
// replicated) gets its origin filled in: origin_region = this region,
// origin_ledger_id/origin_entry_id = its position, origin_seq = the number
// stored with it if any (a local numbering written at append time), else
// its position-derived offset (originSeq). An entry that arrived by replication keeps the origin
// fields it was stored with (it is shipped as stored, for a relay). The
// payload is never touched: only the metadata is re-encoded. It fails with
// ErrNotFound when e's ledger is no longer retained, and with ErrInvalidArgument
// when e is not a well-formed entry.
func (t *topic) shipForm(e LedgerEntry) ([]byte, *clientv1.EntryMetadata, error) {
	md, payload, err := wire.DecodeEntry(e.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: entry %d:%d of %s: %v", ErrInvalidArgument, e.LedgerID, e.EntryID, t.name, err)
	}
	if md.GetReplicated() {
		if md.GetOriginRegion() == "" || md.GetOriginSeq() <= 0 {
			return nil, nil, fmt.Errorf("%w: replicated entry %d:%d of %s has no origin (origin_region %q, origin_seq %d)",
				ErrInvalidArgument, e.LedgerID, e.EntryID, t.name, md.GetOriginRegion(), md.GetOriginSeq())
		}
		return e.Data, md, nil
	}
	p := pos{e.LedgerID, e.EntryID}
	if md.GetOriginSeq() <= 0 {
		// No number stored with the entry: its position-derived offset.
		seq, ok := t.ml.originSeq(p)
		if !ok {
			return nil, nil, fmt.Errorf("%w: ledger %d of %s is no longer retained", ErrNotFound, e.LedgerID, t.name)
		}
		md.OriginSeq = seq
		// Position-derived numbers are the legacy stream's.
		md.OriginIncarnation = 0
	}
	md.OriginRegion = t.b.cfg.Region
	md.OriginLedgerId, md.OriginEntryId = p.L, p.E
	md.ProducerRole = "" // bound here only (producer_bind.go)
	data, err := wire.EncodeEntry(md, payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: re-encode entry %d:%d of %s: %v", ErrInvalidArgument, e.LedgerID, e.EntryID, t.name, err)
	}
	return data, md, nil
}
