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

func decodeSnapshot(data []byte) (*snapshot, error) {
	if len(data) < len(ckptMagic)+20 || (string(data[:len(ckptMagic)]) != ckptMagic && string(data[:len(ckptMagic)]) != ckptMagicV1) {
		return nil, fmt.Errorf("%w: bad magic or too short (%d bytes)", errBadCheckpoint, len(data))
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(data)-4:]) {
		return nil, fmt.Errorf("%w: CRC32C mismatch", errBadCheckpoint)
	}
	r := bytes.NewReader(body[len(ckptMagic):])
	var err error
	u64 := func() uint64 {
		var b [8]byte
		if _, e := io.ReadFull(r, b[:]); e != nil && err == nil {
			err = e
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	s := &snapshot{pos: u64()}
	n := u64()
	if n > uint64(len(body)) {
		return nil, fmt.Errorf("%w: ledger count %d", errBadCheckpoint, n)
	}
	s.ledgers = make([]snapLedger, 0, n)
	for i := uint64(0); i < n && err == nil; i++ {
		l := snapLedger{id: int64(u64())}
		fb, e := r.ReadByte()
		if e != nil {
			err = e
			break
		}
		l.fenced = fb == 1
		l.lac = int64(u64())
		l.last = int64(u64())
		ne := u64()
		if ne > uint64(len(body)) {
			return nil, fmt.Errorf("%w: entry count %d", errBadCheckpoint, ne)
		}
		l.entries = make([]snapEntry, 0, ne)
		for j := uint64(0); j < ne && err == nil; j++ {
			e := snapEntry{entry: int64(u64())}
			e.loc.file = u64()
			e.loc.off = int64(u64())
			var b [4]byte
			if _, e2 := io.ReadFull(r, b[:]); e2 != nil {
				err = e2
			}
			size := binary.LittleEndian.Uint32(b[:])
			e.loc.size, e.loc.corrupt = size&^ckptCorruptBit, size&ckptCorruptBit != 0
			l.entries = append(l.entries, e)
		}
		s.ledgers = append(s.ledgers, l)
	}
	if err == nil && string(data[:len(ckptMagic)]) == ckptMagic {
		nd := u64()
		if nd > uint64(len(body)) {
			return nil, fmt.Errorf("%w: damaged range count %d", errBadCheckpoint, nd)
		}
		for i := uint64(0); i < nd && err == nil; i++ {
			d := damagedRange{file: u64(), from: int64(u64()), to: int64(u64())}
			nl := u64()
			if nl > uint64(len(body)) {
				return nil, fmt.Errorf("%w: damaged range ledger count %d", errBadCheckpoint, nl)
			}
			for j := uint64(0); j < nl && err == nil; j++ {
				d.ledgers = append(d.ledgers, int64(u64()))
			}
			s.damage = append(s.damage, d)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadCheckpoint, err)
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
