package bookie

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"time"
)

// The index checkpoint is one file, LedgerDir/checkpoint, replaced
// atomically (write checkpoint.tmp, fdatasync, rename, fsync the dir):
//
//	"MRDNCKP2" | pos u64 | nLedgers u64 |
//	  per ledger: id i64 | fenced u8 | lac i64 | last i64 | n u64 |
//	    per entry: entry i64 | file u64 | off i64 | size u32
//	| nDamaged u64 |
//	  per damaged range: file u64 | from i64 | to i64 | n u64 | n × ledger i64
//	| CRC32C of everything before, u32
//
// The top bit of size flags an entry indexed as corrupt (records are far
// below 2 GiB). "MRDNCKP1" checkpoints (no damaged ranges, no flag) are
// still read.
//
// pos is a journal file sequence number: the checkpoint reflects every
// record in files < pos and none in files >= pos, so recovery loads it and
// replays files >= pos. A corrupt checkpoint stops the bookie from starting
// (files before pos may already be deleted, fences in them live only here).
const (
	ckptMagic   = "MRDNCKP2"
	ckptMagicV1 = "MRDNCKP1"
	ckptName    = "checkpoint"

	ckptCorruptBit = uint32(1) << 31
)

type snapEntry struct {
	entry int64
	loc   loc
}

type snapLedger struct {
	id      int64
	fenced  bool
	lac     int64
	last    int64
	entries []snapEntry
}

type snapshot struct {
	pos     uint64
	ledgers []snapLedger
	damage  []damagedRange
}

func encodeSnapshot(w io.Writer, s *snapshot) error {
	h := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<16)
	var b [8]byte
	u64 := func(v uint64) { binary.LittleEndian.PutUint64(b[:], v); bw.Write(b[:]) }
	bw.WriteString(ckptMagic)
	u64(s.pos)
	u64(uint64(len(s.ledgers)))
	for _, l := range s.ledgers {
		u64(uint64(l.id))
		if l.fenced {
			bw.WriteByte(1)
		} else {
			bw.WriteByte(0)
		}
		u64(uint64(l.lac))
		u64(uint64(l.last))
		u64(uint64(len(l.entries)))
		for _, e := range l.entries {
			u64(uint64(e.entry))
			u64(e.loc.file)
			u64(uint64(e.loc.off))
			size := e.loc.size
			if e.loc.corrupt {
				size |= ckptCorruptBit
			}
			binary.LittleEndian.PutUint32(b[:4], size)
			bw.Write(b[:4])
		}
	}
	u64(uint64(len(s.damage)))
	for _, d := range s.damage {
		u64(d.file)
		u64(uint64(d.from))
		u64(uint64(d.to))
		u64(uint64(len(d.ledgers)))
		for _, id := range d.ledgers {
			u64(uint64(id))
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b[:4], h.Sum32())
	_, err := w.Write(b[:4])
	return err
}

var errBadCheckpoint = errors.New("bad checkpoint")

// Minimal encoded sizes of the checkpoint's repeated elements. A count read
// from the file is checked against the bytes left in it divided by these
// before anything is allocated, so decoding allocates in proportion to the
// file, never to what a header claims.
const (
	ckptLedgerBytes  = 8 + 1 + 8 + 8 + 8 // id, fenced, lac, last, n
	ckptEntryBytes   = 8 + 8 + 8 + 4     // entry, file, off, size
	ckptDamageBytes  = 8 + 8 + 8 + 8     // file, from, to, n
	ckptDamagedBytes = 8                 // one ledger id of a damaged range
)

// ckptReader reads the fixed-size fields of a checkpoint body; the first
// short read sticks in err and later reads return zero.
type ckptReader struct {
	b   []byte
	err error
}

func (r *ckptReader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("%w: %s: truncated (%d bytes left, need %d)", errBadCheckpoint, field, len(r.b), n)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *ckptReader) u64(field string) uint64 {
	if b := r.take(8, field); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *ckptReader) u32(field string) uint32 {
	if b := r.take(4, field); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ckptReader) u8(field string) byte {
	if b := r.take(1, field); b != nil {
		return b[0]
	}
	return 0
}

// count reads a count of elements of at least elemBytes each and refuses
// one that cannot fit in the bytes left.
func (r *ckptReader) count(field string, elemBytes int) int {
	n := r.u64(field)
	if r.err != nil {
		return 0
	}
	if limit := uint64(len(r.b) / elemBytes); n > limit {
		r.err = fmt.Errorf("%w: %s is %d, at most %d fit in the %d bytes left (%d bytes each)",
			errBadCheckpoint, field, n, limit, len(r.b), elemBytes)
		return 0
	}
	return int(n)
}

// decodeSnapshot parses a checkpoint file. It allocates at most in
// proportion to len(data): every count is bounded by the bytes left.
func decodeSnapshot(data []byte) (*snapshot, error) {
	if len(data) < len(ckptMagic)+20 || (string(data[:len(ckptMagic)]) != ckptMagic && string(data[:len(ckptMagic)]) != ckptMagicV1) {
		return nil, fmt.Errorf("%w: bad magic or too short (%d bytes)", errBadCheckpoint, len(data))
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(data)-4:]) {
		return nil, fmt.Errorf("%w: CRC32C mismatch", errBadCheckpoint)
	}
	r := &ckptReader{b: body[len(ckptMagic):]}
	s := &snapshot{pos: r.u64("pos")}
	n := r.count("nLedgers", ckptLedgerBytes)
	if n > 0 {
		s.ledgers = make([]snapLedger, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		l := snapLedger{id: int64(r.u64("ledger id"))}
		l.fenced = r.u8("fenced") == 1
		l.lac = int64(r.u64("lac"))
		l.last = int64(r.u64("last"))
		ne := r.count("entries of a ledger", ckptEntryBytes)
		if ne > 0 {
			l.entries = make([]snapEntry, 0, ne)
		}
		for j := 0; j < ne && r.err == nil; j++ {
			e := snapEntry{entry: int64(r.u64("entry"))}
			e.loc.file = r.u64("entry file")
			e.loc.off = int64(r.u64("entry offset"))
			size := r.u32("entry size")
			if r.err == nil && (size&^ckptCorruptBit < recHeaderSize || size&^ckptCorruptBit > maxRecordBytes) {
				// Reads allocate an entry's size: only a header's
				// (checked) length is ever indexed.
				r.err = fmt.Errorf("%w: entry size is %d, want in [%d, maxRecordBytes=%d]", errBadCheckpoint, size&^ckptCorruptBit, recHeaderSize, maxRecordBytes)
			}
			e.loc.size, e.loc.corrupt = size&^ckptCorruptBit, size&ckptCorruptBit != 0
			l.entries = append(l.entries, e)
		}
		s.ledgers = append(s.ledgers, l)
	}
	if r.err == nil && string(data[:len(ckptMagic)]) == ckptMagic {
		nd := r.count("nDamaged", ckptDamageBytes)
		if nd > 0 {
			s.damage = make([]damagedRange, 0, nd)
		}
		for i := 0; i < nd && r.err == nil; i++ {
			d := damagedRange{file: r.u64("damaged file"), from: int64(r.u64("damaged from")), to: int64(r.u64("damaged to"))}
			nl := r.count("ledgers of a damaged range", ckptDamagedBytes)
			if nl > 0 {
				d.ledgers = make([]int64, 0, nl)
			}
			for j := 0; j < nl && r.err == nil; j++ {
				d.ledgers = append(d.ledgers, int64(r.u64("damaged ledger")))
			}
			s.damage = append(s.damage, d)
		}
	}
	if r.err == nil && len(r.b) > 0 {
		// Only a crafted file has a valid CRC and bytes the encoder never
		// writes.
		r.err = fmt.Errorf("%w: %d trailing bytes after the last section, want 0", errBadCheckpoint, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// loadCheckpoint reads the checkpoint; nil (no error) when there is none.
func (s *storage) loadCheckpoint() (*snapshot, error) {
	p := filepath.Join(s.idir, ckptName)
	f, err := s.fs.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrIO, p, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("%w: size %s: %v", ErrIO, p, err)
	}
	data := make([]byte, size)
	if err := readFullFile(f, data); err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrIO, p, err)
	}
	snap, err := decodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("bookie: checkpoint %s unusable, refusing to start (restore it or wipe the bookie): %w", p, err)
	}
	return snap, nil
}

func readFullFile(f interface {
	ReadAt([]byte, int64) (int, error)
}, data []byte) error {
	n, err := f.ReadAt(data, 0)
	if n == len(data) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// writeCheckpoint makes snap the durable checkpoint.
func (s *storage) writeCheckpoint(snap *snapshot) error {
	tmp := filepath.Join(s.idir, ckptName+".tmp")
	final := filepath.Join(s.idir, ckptName)
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrIO, tmp, err)
	}
	// faultfs.File only appends; collect in memory then write once.
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, snap); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("%w: write %s: %v", ErrIO, tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%w: sync %s: %v", ErrIO, tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ErrIO, tmp, err)
	}
	if err := s.fs.Rename(tmp, final); err != nil {
		return fmt.Errorf("%w: rename %s: %v", ErrIO, tmp, err)
	}
	if err := s.fs.SyncDir(s.idir); err != nil {
		return fmt.Errorf("%w: sync dir %s: %v", ErrIO, s.idir, err)
	}
	s.ckptSeq = snap.pos
	s.lastCkptAt = time.Now()
	s.m.checkpoints.Inc()
	return nil
}

// checkpoint takes a snapshot through the journal goroutine and persists
// it. Callers hold maintMu.
func (s *storage) checkpointLocked(ctx context.Context) (uint64, error) {
	r := s.submitWait(ctx, &op{kind: opSnapshot})
	if r.err != nil {
		return 0, r.err
	}
	if err := s.writeCheckpoint(r.snap); err != nil {
		s.setIOFailed(err)
		return 0, err
	}
	return r.snap.pos, nil
}

// checkpointNow is the final checkpoint of a graceful close; the journal
// goroutine has exited, so it snapshots directly.
func (s *storage) checkpointNow() error {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	r := s.takeSnapshot()
	if r.err != nil {
		return r.err
	}
	return s.writeCheckpoint(r.snap)
}
