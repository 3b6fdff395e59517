package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/meridianmq/meridian/internal/faultfs"
)

// Replay rules (docs/ARCHITECTURE.md, "Journal replay"):
//
//   - Only the LAST journal file can have a torn tail: every other file was
//     closed after a durable sync. In the last file, a header that is intact
//     but runs past end-of-file, fewer bytes than a header, or a run of
//     records with bad payload CRCs up to end-of-file, is a torn write. It
//     ends the file; recovery cuts it off durably and records the cut in
//     the next journal file (a recTruncate record), so a later restart sees
//     a clean file and never mistakes damage for a torn write.
//   - Anywhere else, a bad record is damage. An entry whose header is intact
//     (its identity is known) is indexed as corrupt: reads answer
//     ErrEntryCorrupt (DATA_LOSS), never "not found".
//   - Replay never trusts a record it found by scanning: after a damaged
//     header it looks for the next intact record, but a CRC-valid record
//     may sit inside a user's payload. From the damage to the end of that
//     file, entries are indexed as corrupt, fences are applied (a fence is
//     only ever safe) and deletes are not (a forged delete would destroy a
//     ledger). The damaged range is kept (in the checkpoint too): reads of
//     entries the index lacks, in ledgers that have records in that file,
//     answer ErrEntryCorrupt, because the lost record may have been theirs.
//   - A checkpoint that references journal files that are missing stops the
//     bookie; new journal files are never numbered below the checkpoint
//     position (files below it are never replayed).
//   - Replay's memory is bounded whatever the files say: payloads are
//     checked through a buffer of at most replayChunk, resync scans through
//     a window of that size, and a header announcing more than
//     maxRecordBytes is not a record (so no indexed entry is larger).

// damagedRange is a part of a journal file whose records cannot be
// identified or trusted (see the replay rules above).
type damagedRange struct {
	file     uint64
	from, to int64
	// ledgers that have records in the file: an entry of theirs missing
	// from the index may have been in the range.
	ledgers []int64
}

// recover loads the checkpoint, replays the journal after it and opens a
// fresh journal file.
func (s *storage) recover() error {
	start := time.Now()
	snap, err := s.loadCheckpoint()
	if err != nil {
		return err
	}
	names, err := s.fs.ReadDir(s.jdir)
	if err != nil {
		return fmt.Errorf("%w: list journal %s: %v", ErrIO, s.jdir, err)
	}
	present := map[uint64]bool{}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseJournalFileName(n); ok {
			seqs = append(seqs, seq)
			present[seq] = true
		}
	}
	slices.Sort(seqs)
	var from uint64
	missing := map[uint64]int{} // journal file -> checkpoint entries in it
	if snap != nil {
		from = snap.pos
		for _, l := range snap.ledgers {
			ls := &ledgerState{fenced: l.fenced, lac: l.lac, last: l.last, entries: make(map[int64]loc, len(l.entries))}
			for _, e := range l.entries {
				ls.entries[e.entry] = e.loc
				if !present[e.loc.file] {
					missing[e.loc.file]++
				}
			}
			s.ledgers[l.id] = ls
		}
		for _, d := range snap.damage {
			if present[d.file] {
				s.damage = append(s.damage, d)
			}
		}
		s.ckptSeq = snap.pos
	}
	var maxSeq uint64
	if len(seqs) > 0 {
		maxSeq = seqs[len(seqs)-1]
	}
	if snap != nil {
		// Files pos, pos+1, ... up to the newest hold everything written
		// after the checkpoint (file pos is created before the checkpoint
		// is written, and GC deletes only files below pos): a gap there is
		// lost acknowledged data, not an empty journal.
		for seq := from; seq <= max(maxSeq, from); seq++ {
			if !present[seq] {
				missing[seq] += 0
			}
		}
		if len(missing) > 0 {
			return missingFilesError(filepath.Join(s.idir, ckptName), s.jdir, missing)
		}
	}
	replayed := 0
	var torn *tornTail
	for _, seq := range seqs {
		p := filepath.Join(s.jdir, journalFileName(seq))
		if seq < from {
			st, err := s.fs.Stat(p)
			if err != nil {
				return fmt.Errorf("%w: stat %s: %v", ErrIO, p, err)
			}
			s.files[seq] = st.Size()
			continue
		}
		r, err := s.replayFile(seq, seq == maxSeq)
		if err != nil {
			return err
		}
		s.files[seq] = r.valid
		replayed += r.records
		if r.valid < r.size {
			torn = &tornTail{seq: seq, valid: r.valid, size: r.size}
		}
	}
	s.checkSizesLocked()
	if torn != nil {
		if err := s.truncateTornTail(torn); err != nil {
			return err
		}
	}
	// Never number a journal file below the checkpoint position: files
	// below it are not replayed, so what is written there would vanish.
	s.curSeq = max(maxSeq+1, from)
	if err := s.openJournalFile(s.curSeq); err != nil {
		return err
	}
	if torn != nil {
		if err := s.recordTruncation(torn); err != nil {
			return err
		}
	}
	s.log.Info("bookie storage recovered", "ledgers", len(s.ledgers), "replayed_records", replayed,
		"checkpoint_pos", from, "journal_files", len(s.files), "damaged_ranges", len(s.damage), "took", time.Since(start))
	return nil
}

func missingFilesError(ckpt, jdir string, missing map[uint64]int) error {
	seqs := make([]uint64, 0, len(missing))
	n := 0
	for seq, c := range missing {
		seqs = append(seqs, seq)
		n += c
	}
	slices.Sort(seqs)
	names := make([]string, len(seqs))
	for i, seq := range seqs {
		names[i] = journalFileName(seq)
	}
	return fmt.Errorf("%w: checkpoint %s references journal files missing from %s: %v (%d indexed entries in them, and whatever was written after the checkpoint); "+
		"refusing to start (restore the files, or wipe this bookie's journal and ledger directories and "+
		"re-format it so autorecovery re-replicates its ledgers)", ErrJournalMissing, ckpt, jdir, names, n)
}

// ErrJournalMissing: the checkpoint references journal files that are not
// on disk; the bookie refuses to start.
var ErrJournalMissing = errors.New("bookie: journal files missing")

// checkSizesLocked flags as corrupt every indexed entry that lies beyond the
// end of its journal file (a file under the checkpoint that lost its end).
// Their CRCs are verified later by the scrub.
func (s *storage) checkSizesLocked() {
	n := 0
	for id, ls := range s.ledgers {
		for e, l := range ls.entries {
			size, ok := s.files[l.file]
			if ok && l.off+int64(l.size) > size && !l.corrupt {
				l.corrupt = true
				ls.entries[e] = l
				n++
				if n <= 10 {
					s.log.Error("journal file shorter than the index says; entry indexed as corrupt",
						"file", journalFileName(l.file), "size", size, "ledger", id, "entry", e, "offset", l.off)
				}
			}
		}
	}
	if n > 0 {
		s.log.Error("entries beyond the end of their journal files indexed as corrupt", "entries", n)
	}
}

type tornTail struct {
	seq         uint64
	valid, size int64
}

type replayResult struct {
	records     int
	valid, size int64 // valid < size only for a torn tail of the last file
}

// replayFile applies the records of journal file seq to the index
// following the replay rules above; last says whether it is the newest
// journal file (the only one that may have a torn tail).
func (s *storage) replayFile(seq uint64, last bool) (replayResult, error) {
	p := filepath.Join(s.jdir, journalFileName(seq))
	f, err := s.fs.Open(p)
	if err != nil {
		return replayResult{}, fmt.Errorf("%w: open %s: %v", ErrIO, p, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return replayResult{}, fmt.Errorf("%w: size %s: %v", ErrIO, p, err)
	}
	res := replayResult{valid: size, size: size}
	type pend struct {
		h   recHeader
		off int64
	}
	var pending []pend // last file: entries with a bad payload CRC, maybe a torn tail
	inFile := map[int64]bool{}
	damagedAt := int64(-1)
	damage := func(from, to int64, why string) {
		if damagedAt < 0 {
			damagedAt = from
		}
		s.log.Error("journal damaged: records from here to the end of the file are not trusted (entries indexed as corrupt, deletes not applied)",
			"file", p, "from", from, "to", to, "reason", why)
	}
	flushPending := func() {
		for _, pr := range pending {
			if ok, suppressed := s.corruptLog.allow(time.Now()); ok {
				s.log.Error("journal record with bad payload CRC; indexed as corrupt", "file", p, "offset", pr.off,
					"ledger", pr.h.ledger, "entry", pr.h.entry, "suppressed_since_last", suppressed)
			}
			s.applyReplay(pr.h, loc{file: seq, off: pr.off, size: pr.h.length, corrupt: true}, damagedAt >= 0, inFile)
		}
		pending = pending[:0]
	}
	// torn ends the file at off, or at the first of the bad records just
	// before it (a group write torn part-way).
	torn := func(off int64) {
		if len(pending) > 0 {
			off = pending[0].off
			pending = nil
		}
		res.valid = off
	}
	var off int64
	hdr := make([]byte, recHeaderSize)
	var buf []byte
	for off < size {
		if size-off < recHeaderSize {
			if last && damagedAt < 0 {
				torn(off)
			} else {
				damage(off, size, "bytes shorter than a record header at the end of the file")
			}
			break
		}
		if err := faultfs.ReadFull(f, hdr, off); err != nil {
			return replayResult{}, fmt.Errorf("%w: read %s@%d: %v", ErrIO, p, off, err)
		}
		h, ok := decodeHeader(hdr)
		if !ok {
			next, found, err := resync(f, off+1, size)
			if err != nil {
				return replayResult{}, fmt.Errorf("%w: read %s: %v", ErrIO, p, err)
			}
			if !found {
				if last && damagedAt < 0 {
					torn(off) // a header torn mid-write, nothing after it
				} else {
					damage(off, size, "damaged record header")
				}
				break
			}
			flushPending()
			damage(off, next, "damaged record header")
			off = next
			continue
		}
		if off+int64(h.length) > size {
			if last && damagedAt < 0 {
				torn(off) // header written, payload torn: ends the file
				break
			}
			flushPending()
			s.applyReplay(h, loc{file: seq, off: off, size: h.length, corrupt: true}, damagedAt >= 0, inFile)
			damage(off, size, "record runs past the end of a closed file")
			break
		}
		c, err := payloadCRC(f, off+recHeaderSize, int64(h.length)-recHeaderSize, &buf)
		if err != nil {
			return replayResult{}, fmt.Errorf("%w: read %s@%d: %v", ErrIO, p, off, err)
		}
		if c != h.dataCRC {
			pending = append(pending, pend{h, off})
			off += int64(h.length)
			continue
		}
		flushPending()
		suspect := damagedAt >= 0
		s.applyReplay(h, loc{file: seq, off: off, size: h.length, corrupt: suspect}, suspect, inFile)
		res.records++
		off += int64(h.length)
	}
	if len(pending) > 0 {
		if last && damagedAt < 0 {
			torn(size) // bad records up to end-of-file: a torn group write
		} else {
			flushPending()
		}
	}
	if damagedAt >= 0 {
		d := damagedRange{file: seq, from: damagedAt, to: size}
		for id := range inFile {
			d.ledgers = append(d.ledgers, id)
		}
		slices.Sort(d.ledgers)
		s.damage = append(s.damage, d)
	}
	if res.valid < size {
		s.log.Warn("journal file has a torn tail (crash during a write); cutting it off", "file", p, "valid_bytes", res.valid, "size", size)
	}
	return res, nil
}

// replayChunk bounds the buffer replay reads a payload through and the
// window resync scans with, so replaying a file allocates at most about
// 2×replayChunk (and never more than twice the file), whatever its headers
// announce.
const replayChunk = 1 << 20

// payloadCRC returns the CRC32C of the n bytes of f at off, read through
// *buf, which it grows (geometrically, up to replayChunk) as needed.
func payloadCRC(f faultfs.File, off, n int64, buf *[]byte) (uint32, error) {
	if want := min(n, replayChunk); int64(cap(*buf)) < want {
		*buf = make([]byte, min(max(want, 2*int64(cap(*buf))), replayChunk))
	}
	b := (*buf)[:cap(*buf)]
	var c uint32
	for n > 0 {
		k := min(n, int64(len(b)))
		if err := faultfs.ReadFull(f, b[:k], off); err != nil {
			return 0, err
		}
		c = crc32.Update(c, castagnoli, b[:k])
		off, n = off+k, n-k
	}
	return c, nil
}

// resync returns the offset of the first intact record (valid header, fits
// in the file, payload CRC32C matches) at or after from. It is only used
// to find where damage ends; what it finds is never trusted as data.
func resync(f faultfs.File, from, size int64) (int64, bool, error) {
	return resyncWindow(f, from, size, replayChunk)
}

// resyncWindow is resync reading the file through a window of window bytes
// (at least recHeaderSize). Consecutive windows overlap by recHeaderSize-1
// bytes so every offset is tried exactly once; a candidate's payload is
// checked in the window when it lies there, else read from f, so a record
// may straddle windows.
func resyncWindow(f faultfs.File, from, size int64, window int) (int64, bool, error) {
	if size-from < recHeaderSize {
		return 0, false, nil
	}
	win := make([]byte, min(int64(max(window, recHeaderSize)), size-from))
	var scratch []byte
	for base := from; size-base >= recHeaderSize; {
		n := int(min(int64(len(win)), size-base))
		if err := faultfs.ReadFull(f, win[:n], base); err != nil {
			return 0, false, err
		}
		for i := 0; i+recHeaderSize <= n; i++ {
			h, ok := decodeHeader(win[i : i+recHeaderSize])
			at := base + int64(i)
			if !ok || at+int64(h.length) > size {
				continue
			}
			var c uint32
			if i+int(h.length) <= n {
				c = crc32.Checksum(win[i+recHeaderSize:i+int(h.length)], castagnoli)
			} else {
				var err error
				if c, err = payloadCRC(f, at+recHeaderSize, int64(h.length)-recHeaderSize, &scratch); err != nil {
					return 0, false, err
				}
			}
			if c == h.dataCRC {
				return at, true, nil
			}
		}
		if base+int64(n) >= size {
			break
		}
		base += int64(n - recHeaderSize + 1)
	}
	return 0, false, nil
}

// applyReplay applies one record to the index. An untrusted record (found
// after damage in its file: it may be planted in a payload) indexes its
// entry as corrupt without raising the ledger's last entry or LAC, applies
// a fence, and never deletes. A record with a bad payload CRC but an intact
// header (l.corrupt) has a trusted identity.
func (s *storage) applyReplay(h recHeader, l loc, untrusted bool, inFile map[int64]bool) {
	if untrusted {
		l.corrupt = true
	}
	switch h.typ {
	case recEntry:
		inFile[h.ledger] = true
		ls := s.ledgers[h.ledger]
		if ls == nil {
			ls = newLedgerState()
			s.ledgers[h.ledger] = ls
		}
		if old, ok := ls.entries[h.entry]; ok && !old.corrupt && l.corrupt {
			return // keep the good copy (a recovery add wrote it twice)
		}
		ls.entries[h.entry] = l
		if !untrusted {
			ls.last = max(ls.last, h.entry)
			ls.lac = max(ls.lac, h.lac)
		}
	case recFence:
		inFile[h.ledger] = true
		ls := s.ledgers[h.ledger]
		if ls == nil {
			ls = newLedgerState()
			s.ledgers[h.ledger] = ls
		}
		ls.fenced = true
	case recDelete:
		if untrusted {
			if ok, suppressed := s.corruptLog.allow(time.Now()); ok {
				s.log.Error("delete record in a damaged journal range not applied (it may be planted in a payload)",
					"ledger", h.ledger, "file", journalFileName(l.file), "offset", l.off, "suppressed_since_last", suppressed)
			}
			return
		}
		delete(s.ledgers, h.ledger)
	case recTruncate:
		s.log.Info("journal file was cut at a torn tail by an earlier recovery",
			"file", journalFileName(uint64(h.entry)), "valid_bytes", h.lac)
	}
}

// truncateTornTail cuts the torn tail off the last journal file durably:
// the valid part is copied to a temporary file, synced and renamed over it
// (faultfs files are append-only).
func (s *storage) truncateTornTail(t *tornTail) error {
	p := filepath.Join(s.jdir, journalFileName(t.seq))
	tmp := p + ".trunc"
	src, err := s.fs.Open(p)
	if err != nil {
		return fmt.Errorf("%w: open %s: %v", ErrIO, p, err)
	}
	defer src.Close()
	dst, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrIO, tmp, err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < t.valid; {
		n := min(int64(len(buf)), t.valid-off)
		if err := faultfs.ReadFull(src, buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			dst.Close()
			return fmt.Errorf("%w: read %s: %v", ErrIO, p, err)
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			dst.Close()
			return fmt.Errorf("%w: write %s: %v", ErrIO, tmp, err)
		}
		off += n
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return fmt.Errorf("%w: sync %s: %v", ErrIO, tmp, err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ErrIO, tmp, err)
	}
	if err := s.fs.Rename(tmp, p); err != nil {
		return fmt.Errorf("%w: rename %s: %v", ErrIO, tmp, err)
	}
	if err := s.fs.SyncDir(s.jdir); err != nil {
		return fmt.Errorf("%w: sync dir %s: %v", ErrIO, s.jdir, err)
	}
	s.log.Warn("journal torn tail cut off", "file", p, "valid_bytes", t.valid, "dropped_bytes", t.size-t.valid)
	return nil
}

// recordTruncation writes a recTruncate record (entry = file, lac = valid
// bytes, payload = the size before the cut) as the first record of the new
// journal file and syncs it.
func (s *storage) recordTruncation(t *tornTail) error {
	var orig [8]byte
	binary.LittleEndian.PutUint64(orig[:], uint64(t.size))
	rec := encodeRecord(nil, recTruncate, -1, int64(t.seq), t.valid, orig[:])
	if _, err := s.cur.Write(rec); err != nil {
		return fmt.Errorf("%w: journal write %s: %v", ErrIO, journalFileName(s.curSeq), err)
	}
	if err := s.cur.Sync(); err != nil {
		return fmt.Errorf("%w: journal fdatasync %s: %v", ErrIO, journalFileName(s.curSeq), err)
	}
	s.curSize += int64(len(rec))
	s.mu.Lock()
	s.files[s.curSeq] = s.curSize
	s.truncations = append(s.truncations, *t)
	s.mu.Unlock()
	return nil
}

// damagedFor reports whether an entry of ledger missing from the index may
// have been lost in a damaged journal range; call with mu held.
func (s *storage) damagedForLocked(ledger int64) (damagedRange, bool) {
	for _, d := range s.damage {
		if i := sort.Search(len(d.ledgers), func(i int) bool { return d.ledgers[i] >= ledger }); i < len(d.ledgers) && d.ledgers[i] == ledger {
			return d, true
		}
	}
	return damagedRange{}, false
}
