package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/internal/faultfs"
)

// Fuzz targets for the bytes the bookie reads back from its own disks:
// journal records, journal files (replay and resync) and checkpoints. A
// disk that lies, a planted file or a crafted user payload must never
// panic the bookie, make it allocate out of proportion to what it read, or
// get a record that fails its CRCs into the index. Seeds are in
// testdata/fuzz/FuzzXxx/ (plain `go test` runs them) and below.

// totalAlloc is runtime.MemStats.TotalAlloc: cumulative, so a delta needs
// no GC first.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// seedJournals are journal files: intact, torn, damaged, with records
// planted in payloads and headers announcing huge records.
func seedJournals() [][]byte {
	r0 := encodeRecord(nil, recEntry, 1, 0, -1, []byte("hello"))
	r1 := encodeRecord(nil, recEntry, 1, 1, 0, bytes.Repeat([]byte{7}, 300))
	fence := encodeRecord(nil, recFence, 1, -1, -1, nil)
	del := encodeRecord(nil, recDelete, 2, -1, -1, nil)
	trunc := encodeRecord(nil, recTruncate, -1, 3, 100, binary.LittleEndian.AppendUint64(nil, 200))
	planted := encodeRecord(nil, recEntry, 2, 0, -1, append(append([]byte("xx"), del...), fence...))
	badPayload := bytes.Clone(r1)
	badPayload[len(badPayload)-1] ^= 1
	badHeader := bytes.Clone(r1)
	badHeader[13] ^= 1
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return [][]byte{
		nil,
		cat(r0, r1, fence, del, trunc),
		cat(r0, r1[:len(r1)-10]),               // torn payload
		cat(r0, r1[:20]),                       // torn header
		cat(r0, badPayload, r1),                // bad payload CRC in the middle
		cat(r0, badPayload),                    // bad payload CRC at the end
		cat(r0, badHeader, []byte("junk"), r1), // damaged header, resync
		cat(badHeader, planted, del),           // damage, then planted records
		cat(r0, craftHeader(recEntry, 1, 1, 1<<30)),
		cat(r0, craftHeader(recEntry, 1, 1, maxRecordBytes+1), r1),
		cat(craftHeader(recEntry, 1, 1, 500), r0, r1),
	}
}

// seedHeaders are CRC-valid headers announcing impossible or huge records.
func seedHeaders() [][]byte {
	return [][]byte{
		craftHeader(recEntry, 1, 1, 1<<30),
		craftHeader(recEntry, 1, 1, maxRecordBytes+1),
		craftHeader(recEntry, 1, 1, maxRecordBytes),
		craftHeader(recEntry, 1, 1, recHeaderSize-1),
		craftHeader(recTruncate+1, 1, 1, recHeaderSize),
	}
}

func FuzzJournalRecord(f *testing.F) {
	for _, j := range seedJournals() {
		f.Add(j, byte(recEntry), int64(1), int64(2), int64(1))
	}
	f.Add([]byte{}, byte(recFence), int64(-1), int64(-1), int64(-1))
	for _, h := range seedHeaders() {
		f.Add(h, byte(recDelete), int64(3), int64(-1), int64(-1))
	}
	f.Fuzz(func(t *testing.T, data []byte, typ byte, ledger, entry, lac int64) {
		// Arbitrary bytes: a header that decodes is a possible record.
		if h, ok := decodeHeader(data); ok {
			if h.length < recHeaderSize || h.length > maxRecordBytes || h.typ < recEntry || h.typ > recTruncate {
				t.Fatalf("decodeHeader accepted %+v", h)
			}
			if headerCRC(data) != binary.LittleEndian.Uint32(data[4:8]) {
				t.Fatal("decodeHeader accepted a header whose CRC fails")
			}
			// A whole record with a good payload CRC and zero reserved
			// bytes is exactly what encodeRecord writes for its fields.
			if int(h.length) <= len(data) && crc32.Checksum(data[recHeaderSize:h.length], castagnoli) == h.dataCRC &&
				data[9] == 0 && data[10] == 0 && data[11] == 0 {
				if re := encodeRecord(nil, h.typ, h.ledger, h.entry, h.lac, data[recHeaderSize:h.length]); !bytes.Equal(re, data[:h.length]) {
					t.Fatalf("re-encoded record differs:\n%x\n%x", re, data[:h.length])
				}
			}
		}
		// Encoded records decode to their fields, and any one flipped
		// header bit makes the header fail.
		typ = recEntry + typ%4
		rec := encodeRecord(nil, typ, ledger, entry, lac, data)
		h, ok := decodeHeader(rec)
		want := recHeader{length: uint32(len(rec)), typ: typ, ledger: ledger, entry: entry, lac: lac, dataCRC: crc32.Checksum(data, castagnoli)}
		if !ok || h != want {
			t.Fatalf("round trip: decodeHeader = %+v %v, want %+v", h, ok, want)
		}
		for bit := range recHeaderSize * 8 {
			rec[bit/8] ^= 1 << (bit % 8)
			if _, ok := decodeHeader(rec); ok {
				t.Fatalf("header with bit %d flipped still decodes", bit)
			}
			rec[bit/8] ^= 1 << (bit % 8)
		}
	})
}

func FuzzJournalReplay(f *testing.F) {
	for _, j := range seedJournals() {
		f.Add(j, true, uint16(1))
		f.Add(j, false, uint16(45))
	}
	// One directory for every input: the fuzz function runs one input at
	// a time in a process, and a directory per input halves the rate.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, last bool, from uint16) {
		p := writeJournal(t, dir, 9, 0, data)
		s := replayStorage(dir)
		before := totalAlloc()
		res, err := s.replayFile(9, last)
		alloc := totalAlloc() - before
		if err != nil {
			t.Fatal(err)
		}
		// Window and payload buffer (each at most replayChunk and twice
		// the file), plus index entries and logging per record.
		if limit := uint64(min(4*replayChunk, 8*len(data))) + uint64(256*len(data)) + 64<<10; alloc > limit {
			t.Fatalf("replay of %d bytes allocated %d, limit %d", len(data), alloc, limit)
		}
		if res.size != int64(len(data)) || res.valid < 0 || res.valid > res.size || (!last && res.valid != res.size) {
			t.Fatalf("replay result %+v for a %d-byte file (last=%v)", res, len(data), last)
		}
		checkIndexSane(t, s, p)
		for _, d := range s.damage {
			if d.file != 9 || d.from < 0 || d.from > d.to || d.to != res.size {
				t.Fatalf("damaged range %+v in a %d-byte file", d, len(data))
			}
		}
		// resync through a tiny window agrees with a scan of the rest of
		// the file.
		fh, err := faultfs.OS{}.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		at := int64(from) % (int64(len(data)) + 1)
		want, wantOK := resyncReference(data, at)
		for _, w := range []int{recHeaderSize, 61, replayChunk} {
			got, ok, err := resyncWindow(fh, at, int64(len(data)), w)
			if err != nil || ok != wantOK || got != want {
				t.Fatalf("resync from %d window %d = %d %v %v, whole-file scan = %d %v", at, w, got, ok, err, want, wantOK)
			}
		}
	})
}

// seedCheckpoints are checkpoint files: valid (v1 and v2), empty, and
// crafted counts.
func seedCheckpoints() [][]byte {
	var out [][]byte
	for _, s := range []*snapshot{{}, testSnapshot(1, 1), testSnapshot(3, 4), {pos: 2, damage: []damagedRange{{file: 1, from: 2, to: 3}}}} {
		var b bytes.Buffer
		if err := encodeSnapshot(&b, s); err != nil {
			panic(err)
		}
		out = append(out, b.Bytes())
	}
	v1 := []byte(ckptMagicV1)
	v1 = binary.LittleEndian.AppendUint64(v1, 4) // pos
	v1 = binary.LittleEndian.AppendUint64(v1, 0) // nLedgers; v1 has no damaged ranges
	v1 = binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, castagnoli))
	out = append(out, v1,
		craftCheckpoint([]uint64{0, 1 << 31}, 100-len(ckptMagic)-16-4),
		craftCheckpoint([]uint64{0, 100}, 64),
		craftCheckpoint([]uint64{0, 223}, 200),    // nLedgers = body length - 1 passed the old check
		craftCheckpoint([]uint64{0, 0, 223}, 192), // so did nDamaged
		craftCheckpoint([]uint64{0, 0, 1 << 40}, 8))
	return out
}

func FuzzCheckpoint(f *testing.F) {
	for _, c := range seedCheckpoints() {
		f.Add(c, false)
		f.Add(c[:len(c)-4], true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC {
			// Let the fuzzer explore the structure behind the CRC.
			data = binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.Checksum(data, castagnoli))
		}
		// The least of three runs: the first may pay for lazy runtime
		// state, and the delta is process-wide.
		var s *snapshot
		var err error
		alloc := ^uint64(0)
		for range 3 {
			before := totalAlloc()
			s, err = decodeSnapshot(data)
			alloc = min(alloc, totalAlloc()-before)
		}
		// The decoded structs are at most 56/33 and 32/28 bytes per
		// encoded byte, plus append growth of damaged-range slices.
		if limit := uint64(4*len(data)) + 4<<10; alloc > limit {
			t.Fatalf("decoding %d bytes allocated %d, limit %d", len(data), alloc, limit)
		}
		if err != nil {
			if !errors.Is(err, errBadCheckpoint) {
				t.Fatalf("error %v is not errBadCheckpoint", err)
			}
			return
		}
		var b bytes.Buffer
		if err := encodeSnapshot(&b, s); err != nil {
			t.Fatal(err)
		}
		wantLen := len(data)
		if string(data[:len(ckptMagicV1)]) == ckptMagicV1 {
			wantLen += 8 // v2 adds the damaged-range count
		}
		if b.Len() != wantLen {
			t.Fatalf("re-encoded %d bytes as %d", len(data), b.Len())
		}
		s2, err := decodeSnapshot(b.Bytes())
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v", err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip differs:\n%+v\n%+v", s, s2)
		}
	})
}

// TestWriteFuzzSeeds writes the seeds above to testdata/fuzz when
// MERIDIAN_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MERIDIAN_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MERIDIAN_WRITE_FUZZ_SEEDS=1 to rewrite the testdata/fuzz seeds")
	}
	write := func(target string, i int, vals ...string) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "go test fuzz v1\n" + strings.Join(vals, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range seedHeaders() {
		write("FuzzJournalRecord", 50+i, fmt.Sprintf("[]byte(%q)", h), "byte('\\x03')", "int64(3)", "int64(-1)", "int64(-1)")
	}
	for i, j := range seedJournals() {
		write("FuzzJournalRecord", i, fmt.Sprintf("[]byte(%q)", j), "byte('\\x01')", "int64(1)", "int64(2)", "int64(1)")
		write("FuzzJournalReplay", i, fmt.Sprintf("[]byte(%q)", j), fmt.Sprintf("bool(%v)", i%2 == 0), fmt.Sprintf("uint16(%d)", 1+i*13))
	}
	for i, c := range seedCheckpoints() {
		write("FuzzCheckpoint", 2*i, fmt.Sprintf("[]byte(%q)", c), "bool(false)")
		write("FuzzCheckpoint", 2*i+1, fmt.Sprintf("[]byte(%q)", c[:len(c)-4]), "bool(true)")
	}
}
