package bookie

import (
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/meridianmq/meridian/internal/faultfs"
)

// replayStorage is a storage with just what replayFile needs, over the
// journal directory dir.
func replayStorage(dir string) *storage {
	return &storage{fs: faultfs.OS{}, jdir: dir, log: slog.New(slog.DiscardHandler),
		ledgers: map[int64]*ledgerState{}, files: map[uint64]int64{}}
}

// writeJournal writes journal file seq of dir with the given parts, then
// extends it (sparse, zeros) to size bytes when size is larger.
func writeJournal(t testing.TB, dir string, seq uint64, size int64, parts ...[]byte) string {
	t.Helper()
	p := filepath.Join(dir, journalFileName(seq))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, b := range parts {
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		n += int64(len(b))
	}
	if size > n {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// craftHeader is a header with a valid header CRC announcing length bytes
// (header included) and a payload CRC that matches nothing.
func craftHeader(typ byte, ledger, entry int64, length uint32) []byte {
	var h [recHeaderSize]byte
	encodeHeader(&h, typ, ledger, entry, entry-1, nil)
	binary.LittleEndian.PutUint32(h[0:4], length)
	binary.LittleEndian.PutUint32(h[36:40], 0xdeadbeef)
	binary.LittleEndian.PutUint32(h[4:8], headerCRC(h[:]))
	return h[:]
}

// checkIndexSane asserts that every entry replay indexed is at most
// maxRecordBytes and starts, inside its file, with an intact header naming
// it; one that runs past the end of its file (a closed file's last record
// whose header is intact) is flagged corrupt, and one not flagged corrupt
// has a matching payload CRC.
func checkIndexSane(t testing.TB, s *storage, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for id, ls := range s.ledgers {
		for e, l := range ls.entries {
			if l.size > maxRecordBytes || l.off < 0 || l.off+recHeaderSize > int64(len(data)) {
				t.Fatalf("ledger %d entry %d indexed at %d+%d: header outside the %d-byte file or size above maxRecordBytes=%d", id, e, l.off, l.size, len(data), maxRecordBytes)
			}
			h, ok := decodeHeader(data[l.off : l.off+recHeaderSize])
			if !ok || h.ledger != id || h.entry != e || h.length != l.size || h.typ != recEntry {
				t.Fatalf("ledger %d entry %d indexed at %d: header %+v ok=%v does not name it", id, e, l.off, h, ok)
			}
			if l.off+int64(l.size) > int64(len(data)) {
				if !l.corrupt {
					t.Fatalf("ledger %d entry %d indexed intact at %d+%d, past the end of the %d-byte file", id, e, l.off, l.size, len(data))
				}
				continue
			}
			if !l.corrupt && crc32.Checksum(data[l.off+recHeaderSize:l.off+int64(l.size)], castagnoli) != h.dataCRC {
				t.Fatalf("ledger %d entry %d indexed intact at %d but its payload CRC fails", id, e, l.off)
			}
		}
	}
}

// A damaged header followed by megabytes of garbage: resync scans for the
// next intact record through a bounded window. Before the fix it read the
// whole rest of the file into one buffer (8 MiB here).
func TestResyncScansThroughABoundedWindow(t *testing.T) {
	dir := t.TempDir()
	const garbage = 8 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, garbage)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	good := encodeRecord(nil, recEntry, 1, 0, -1, []byte("before"))
	bad := encodeRecord(nil, recEntry, 1, 1, 0, []byte("damaged"))
	bad[5] ^= 0xff // header CRC fails
	after := encodeRecord(nil, recEntry, 1, 2, 1, []byte("after the garbage"))
	p := writeJournal(t, dir, 3, 0, good, bad, junk, after)
	junk = nil
	for _, last := range []bool{false, true} {
		s := replayStorage(dir)
		var res replayResult
		var err error
		a := allocated(func() { res, err = s.replayFile(3, last) })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("last=%v: replay of a %d-byte file with a damaged header allocated %d bytes", last, res.size, a)
		if a > 4<<20 {
			t.Errorf("last=%v: replay allocated %d bytes, want <= 4 MiB (1 MiB window)", last, a)
		}
		ls := s.ledgers[1]
		if ls == nil || len(ls.entries) != 2 || !ls.entries[2].corrupt || ls.entries[0].corrupt {
			t.Fatalf("last=%v: index %+v, want entry 0 intact and entry 2 (after the damage) found and flagged corrupt", last, ls)
		}
		if len(s.damage) != 1 || s.damage[0].from != int64(len(good)) {
			t.Fatalf("last=%v: damage %+v, want one range from %d", last, s.damage, len(good))
		}
		if res.valid != res.size {
			t.Fatalf("last=%v: valid %d of %d: damage followed by an intact record is not a torn tail", last, res.valid, res.size)
		}
		checkIndexSane(t, s, p)
	}
}

// Headers with a valid CRC that announce huge records. A record is read
// through a bounded buffer and a length above maxRecordBytes is no record
// (the journal never wrote one). Before the fix replay allocated a buffer of
// the announced length (60 MiB here; 64 MiB for a record just above
// maxRecordBytes), and indexed the 1 GiB "record" of a closed file as a
// corrupt entry of 1 GiB, which a read would allocate.
func TestReplayHugeRecordHeaders(t *testing.T) {
	tests := []struct {
		name    string
		last    bool
		size    int64
		parts   [][]byte
		entries int
	}{
		{"1 GiB record in the last file (torn tail)", true, 0,
			[][]byte{encodeRecord(nil, recEntry, 1, 0, -1, []byte("x")), craftHeader(recEntry, 1, 1, 1<<30)}, 1},
		{"1 GiB record in a closed file", false, 0,
			[][]byte{encodeRecord(nil, recEntry, 1, 0, -1, []byte("x")), craftHeader(recEntry, 1, 1, 1<<30)}, 1},
		{"maxRecordBytes+1 record inside a sparse closed file", false, maxRecordBytes + 4096,
			[][]byte{craftHeader(recEntry, 1, 1, maxRecordBytes+1)}, 0},
		{"60 MiB record with a bad payload in a sparse closed file", false, 61 << 20,
			[][]byte{craftHeader(recEntry, 1, 1, 60<<20)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeJournal(t, dir, 5, tc.size, tc.parts...)
			s := replayStorage(dir)
			var err error
			a := allocated(func() { _, err = s.replayFile(5, tc.last) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("replay allocated %d bytes", a)
			if a > 4<<20 {
				t.Errorf("replay allocated %d bytes, want <= 4 MiB", a)
			}
			n := 0
			for _, ls := range s.ledgers {
				n += len(ls.entries)
			}
			if n != tc.entries {
				t.Errorf("%d entries indexed, want %d", n, tc.entries)
			}
			checkIndexSane(t, s, p)
		})
	}
}

// resyncReference is resync as it was before the bounded window: the rest
// of the file in one buffer. The windowed scan must agree with it.
func resyncReference(data []byte, from int64) (int64, bool) {
	if from >= int64(len(data)) {
		return 0, false
	}
	rest := data[from:]
	for i := 0; i+recHeaderSize <= len(rest); i++ {
		h, ok := decodeHeader(rest[i : i+recHeaderSize])
		if !ok || i+int(h.length) > len(rest) {
			continue
		}
		if crc32.Checksum(rest[i+recHeaderSize:i+int(h.length)], castagnoli) == h.dataCRC {
			return from + int64(i), true
		}
	}
	return 0, false
}

// Records straddling windows, and windows as small as a header, find the
// same record as a scan of the whole rest of the file.
func TestResyncWindowMatchesWholeFileScan(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	found := 0
	for trial := range 200 {
		var parts [][]byte
		for range 1 + rng.IntN(4) {
			junk := make([]byte, rng.IntN(300))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			payload := make([]byte, rng.IntN(500))
			rec := encodeRecord(nil, recEntry, 1, int64(trial), 0, payload)
			if rng.IntN(3) == 0 {
				rec[rng.IntN(len(rec))] ^= 1 // a bad header or payload CRC
			}
			parts = append(parts, junk, rec)
		}
		p := writeJournal(t, dir, uint64(trial), 0, parts...)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := faultfs.OS{}.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		from := int64(rng.IntN(len(data) + 1))
		want, wantOK := resyncReference(data, from)
		for _, w := range []int{recHeaderSize, recHeaderSize + 1, 64, 97, 333, 1 << 20} {
			got, ok, err := resyncWindow(f, from, int64(len(data)), w)
			if err != nil || ok != wantOK || got != want {
				f.Close()
				t.Fatalf("trial %d from %d window %d: resync = %d %v %v, whole-file scan = %d %v", trial, from, w, got, ok, err, want, wantOK)
			}
		}
		f.Close()
		if wantOK {
			found++
		}
	}
	if found < 50 || found > 190 {
		t.Fatalf("%d of 200 trials found a record: the cases do not cover both outcomes", found)
	}
}

// maxRecordBytes is what the journal can hold: the largest MaxEntryBytes
// Validate accepts plus a header. Were Validate to accept more, replay
// would reject records the journal wrote.
func TestMaxRecordBytesCoversMaxEntryBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.JournalDir = "b1", t.TempDir()
	cfg.MaxEntryBytes = maxRecordBytes - recHeaderSize
	if err := cfg.Validate(); err != nil {
		t.Fatalf("MaxEntryBytes = maxRecordBytes-recHeaderSize refused: %v", err)
	}
	cfg.MaxEntryBytes++
	if err := cfg.Validate(); err == nil {
		t.Fatalf("MaxEntryBytes=%d accepted: replay refuses records above maxRecordBytes=%d", cfg.MaxEntryBytes, maxRecordBytes)
	}
}
