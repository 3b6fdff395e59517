package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates (runtime.MemStats TotalAlloc
// delta): process-wide, so callers leave a generous margin.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// craftCheckpoint returns a CRC-valid checkpoint whose body is magic, then
// the given u64 words, then pad zero bytes.
func craftCheckpoint(words []uint64, pad int) []byte {
	b := []byte(ckptMagic)
	for _, w := range words {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	b = append(b, make([]byte, pad)...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func testSnapshot(ledgers, entries int) *snapshot {
	s := &snapshot{pos: 7}
	for l := range ledgers {
		sl := snapLedger{id: int64(l), fenced: l%3 == 0, lac: int64(entries - 2), last: int64(entries - 1)}
		for e := range entries {
			sl.entries = append(sl.entries, snapEntry{entry: int64(e), loc: loc{file: uint64(l % 5), off: int64(e) * 1000, size: 1000, corrupt: e%17 == 0}})
		}
		s.ledgers = append(s.ledgers, sl)
	}
	s.damage = []damagedRange{{file: 3, from: 10, to: 99, ledgers: []int64{1, 2, 3}}}
	return s
}

// A valid checkpoint decodes into about what it weighs: the decoded index
// is ~1.1-1.7x the file (snapEntry is 32 bytes for 28 encoded, snapLedger
// 56 for 33).
func TestCheckpointValidAllocationPerByte(t *testing.T) {
	for _, tc := range []struct{ ledgers, entries int }{{20000, 1}, {1000, 100}, {10, 10000}} {
		var buf bytes.Buffer
		if err := encodeSnapshot(&buf, testSnapshot(tc.ledgers, tc.entries)); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		var err error
		a := allocated(func() { _, err = decodeSnapshot(data) })
		if err != nil {
			t.Fatal(err)
		}
		perByte := float64(a) / float64(len(data))
		t.Logf("%d ledgers x %d entries: %d-byte checkpoint, decode allocated %d bytes (%.2f per byte of file)", tc.ledgers, tc.entries, len(data), a, perByte)
		if perByte > 4 {
			t.Errorf("valid checkpoint: %.2f bytes allocated per byte of file, want <= 4", perByte)
		}
	}
}

// Counts read from a checkpoint are bounded by the bytes left in it before
// anything is allocated. Before the fix a count just below the body's length
// passed the check and a 1 MiB checkpoint preallocated 56 MiB of ledgers
// (or 32 MiB of entries).
func TestCheckpointCraftedCountsAllocateInProportion(t *testing.T) {
	const pad = 1 << 20
	body := len(ckptMagic) + 16 + pad
	// One ledger whose entry count is near the body's length.
	entries := []byte(ckptMagic)
	entries = binary.LittleEndian.AppendUint64(entries, 0)   // pos
	entries = binary.LittleEndian.AppendUint64(entries, 1)   // nLedgers
	entries = binary.LittleEndian.AppendUint64(entries, 42)  // id
	entries = append(entries, 0)                             // fenced
	entries = binary.LittleEndian.AppendUint64(entries, 0)   // lac
	entries = binary.LittleEndian.AppendUint64(entries, 0)   // last
	entries = binary.LittleEndian.AppendUint64(entries, pad) // n entries
	entries = append(entries, make([]byte, pad)...)
	entries = binary.LittleEndian.AppendUint32(entries, crc32.Checksum(entries, castagnoli))

	for _, tc := range []struct {
		name, field string
		data        []byte
	}{
		{"ledger count", "nLedgers", craftCheckpoint([]uint64{0, uint64(body - 1)}, pad)},
		{"entry count", "entries", entries},
		{"damaged range count", "nDamaged", craftCheckpoint([]uint64{0, 0, uint64(body - 1)}, pad)},
		{"100 bytes announcing 2^31 ledgers", "nLedgers", craftCheckpoint([]uint64{0, 1 << 31}, 100-len(ckptMagic)-16-4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			a := allocated(func() { _, err = decodeSnapshot(tc.data) })
			t.Logf("%d-byte crafted checkpoint: decode allocated %d bytes (%.1f per byte), err=%v", len(tc.data), a, float64(a)/float64(len(tc.data)), err)
			if limit := uint64(4*len(tc.data)) + 1<<20; a > limit {
				t.Errorf("crafted checkpoint of %d bytes allocated %d bytes, want <= %d", len(tc.data), a, limit)
			}
			if !errors.Is(err, errBadCheckpoint) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "at most") {
				t.Errorf("err = %v, want errBadCheckpoint naming %s and its limit", err, tc.field)
			}
		})
	}
}
