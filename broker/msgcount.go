package broker

import (
	"github.com/meridianmq/meridian/internal/wire"
)

// Message counts.
//
// An entry is one producer batch; stats count messages too (Pulsar's
// msgBacklog). The broker learns an entry's message count
// (EntryMetadata.num_messages) without an extra read when it writes the
// entry or reads it for dispatch, and keeps it per ledger in memory
// (4 bytes per entry). An entry it has neither written nor read since it
// loaded the topic (a takeover's backlog not dispatched yet) counts as its
// ledger's average over the entries it knows, or 1 when it knows none:
// such counts are estimates and the stats say so. A closed ledger whose
// closer knew every count stores its total (ledgerInfo.Messages), and a
// takeover learns the counts of the entries its dedup scan reads (the
// ledgers after the dedup snapshot, the previous owner's open one
// included), so whole ledgers are exact after a move too.

// ledgerMsgs holds the known message counts of one ledger's entries.
type ledgerMsgs struct {
	counts []int32 // by entry ID; 0 = unknown
	known  int64   // entries with a known count
	sum    int64   // sum of the known counts
}

// maxCountedEntryID bounds the per-ledger count slice: entries past it
// (ledgers roll over long before) are estimated.
const maxCountedEntryID = 1 << 22

// noteMsgsLocked records that entry p holds n messages. ml.mu held.
func (ml *managedLedger) noteMsgsLocked(p pos, n int32) {
	if _, ok := ml.seqOf[p.L]; !ok {
		return // not (or no longer) one of the topic's ledgers
	}
	ml.msgs = noteCount(ml.msgs, p, n)
}

// noteCount records in m that entry p holds n messages; it returns m
// (allocated when nil).
func noteCount(m map[int64]*ledgerMsgs, p pos, n int32) map[int64]*ledgerMsgs {
	if n <= 0 || p.E < 0 || p.E >= maxCountedEntryID {
		return m
	}
	if m == nil {
		m = map[int64]*ledgerMsgs{}
	}
	lm := m[p.L]
	if lm == nil {
		lm = &ledgerMsgs{}
		m[p.L] = lm
	}
	if int(p.E) >= len(lm.counts) {
		grow := max(int(p.E)+1, 2*len(lm.counts), 64)
		lm.counts = append(lm.counts, make([]int32, grow-len(lm.counts))...)
	}
	if lm.counts[p.E] != 0 {
		return m
	}
	lm.counts[p.E] = n
	lm.known++
	lm.sum += int64(n)
	return m
}

// total returns the ledger's message count when every one of its entries
// is known, else 0 (unknown). Nil-safe.
func (lm *ledgerMsgs) total(entries int64) int64 {
	if lm == nil || entries <= 0 || lm.known != entries {
		return 0
	}
	return lm.sum
}

// ledgerLocked returns the retained ledger id's info (nil if none).
func (ml *managedLedger) ledgerLocked(id int64) *ledgerInfo {
	for i := range ml.rec.Ledgers {
		if ml.rec.Ledgers[i].ID == id {
			return &ml.rec.Ledgers[i]
		}
	}
	return nil
}

// noteEntryData records the message count of a stored entry's bytes.
func (ml *managedLedger) noteEntryDataLocked(p pos, data []byte) {
	md, _, err := wire.DecodeEntry(data)
	if err != nil {
		return
	}
	ml.noteMsgsLocked(p, max(md.GetNumMessages(), 1))
}

// msgsOfLocked returns entry p's message count and whether it is exact.
func (ml *managedLedger) msgsOfLocked(p pos) (int64, bool) {
	lm := ml.msgs[p.L]
	if lm != nil && p.E >= 0 && int(p.E) < len(lm.counts) && lm.counts[p.E] != 0 {
		return int64(lm.counts[p.E]), true
	}
	if li := ml.ledgerLocked(p.L); li != nil && li.Messages > 0 && li.Entries > 0 {
		return max(1, (li.Messages+li.Entries/2)/li.Entries), false
	}
	if lm == nil || lm.known == 0 {
		return 1, false
	}
	return max(1, (lm.sum+lm.known/2)/lm.known), false
}

// msgsAfterLocked counts the messages of the stored entries strictly
// after p, and whether every count is exact. It also forgets the counts
// of ledgers no longer retained. ml.mu held.
func (ml *managedLedger) msgsAfterLocked(p pos) (int64, bool) {
	for id := range ml.msgs {
		if _, ok := ml.seqOf[id]; !ok {
			delete(ml.msgs, id)
		}
	}
	s, e := ml.keyLocked(p)
	var total int64
	exact := true
	for i, li := range ml.rec.Ledgers {
		n := ml.countLocked(i)
		if li.Seq < s || n == 0 {
			continue
		}
		first := int64(0)
		if li.Seq == s {
			first = e + 1
		}
		if first >= n {
			continue
		}
		lm := ml.msgs[li.ID]
		if first == 0 && lm != nil && lm.known == n {
			total += lm.sum // every entry known: no walk
			continue
		}
		if first == 0 && li.Messages > 0 && li.Entries == n {
			total += li.Messages // a closed ledger's stored total
			continue
		}
		for x := first; x < n; x++ {
			c, ok := ml.msgsOfLocked(pos{li.ID, x})
			total += c
			exact = exact && ok
		}
	}
	return total, exact
}
