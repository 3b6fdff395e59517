package bookie

import (
	"encoding/binary"
	"hash/crc32"
)

// Journal record layout (little endian). Every record is self-describing so
// the journal can be replayed without the index, and every entry can be
// read back by (file, offset) without scanning.
//
//	[0:4]   total record length (header + payload), uint32
//	[4:8]   header CRC32C over [0:4] ++ [8:40]
//	[8]     record type (recEntry, recFence, recDelete, recTruncate)
//	[9]     flags (reserved, 0)
//	[10:12] reserved
//	[12:20] ledger id, int64
//	[20:28] entry id, int64 (-1 for fence/delete)
//	[28:36] last-add-confirmed piggybacked on the add, int64
//	[36:40] payload CRC32C
//	[40:]   payload
//
// The header has its own CRC so replay can trust the ledger/entry/length of
// a record whose payload is corrupt: such an entry is indexed and reported
// as corrupt on read, never as missing.
const (
	recHeaderSize = 40

	// maxRecordBytes is the largest record the journal ever writes: a
	// header and the largest payload Config.Validate allows (MaxEntryBytes
	// <= 64 MiB), whatever MaxEntryBytes is now (it may have been larger
	// when the record was written). A header announcing more is not a
	// record, so neither replay nor the index ever trusts such a length.
	maxRecordBytes = recHeaderSize + 64<<20

	recEntry  byte = 1
	recFence  byte = 2
	recDelete byte = 3
	// recTruncate records that recovery cut a torn tail off a journal file:
	// entry = the file's sequence number, lac = the bytes kept, payload =
	// the size before the cut (u64). Informational on replay.
	recTruncate byte = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type recHeader struct {
	length  uint32
	typ     byte
	ledger  int64
	entry   int64
	lac     int64
	dataCRC uint32
}

// encodeRecord appends the record to dst and returns it.
func encodeRecord(dst []byte, typ byte, ledger, entry, lac int64, payload []byte) []byte {
	var h [recHeaderSize]byte
	encodeHeader(&h, typ, ledger, entry, lac, payload)
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// encodeHeader fills h with the header of the record carrying payload.
func encodeHeader(h *[recHeaderSize]byte, typ byte, ledger, entry, lac int64, payload []byte) {
	binary.LittleEndian.PutUint32(h[0:4], uint32(recHeaderSize+len(payload)))
	h[8] = typ
	binary.LittleEndian.PutUint64(h[12:20], uint64(ledger))
	binary.LittleEndian.PutUint64(h[20:28], uint64(entry))
	binary.LittleEndian.PutUint64(h[28:36], uint64(lac))
	binary.LittleEndian.PutUint32(h[36:40], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[4:8], headerCRC(h[:]))
}

func headerCRC(h []byte) uint32 {
	c := crc32.Update(0, castagnoli, h[0:4])
	return crc32.Update(c, castagnoli, h[8:recHeaderSize])
}

// decodeHeader parses and checks a header; ok is false when its CRC fails,
// its type is unknown or its length is impossible (below recHeaderSize or
// above maxRecordBytes).
func decodeHeader(h []byte) (recHeader, bool) {
	if len(h) < recHeaderSize {
		return recHeader{}, false
	}
	// The cheap checks first: resync tries every offset of damaged files.
	if length := binary.LittleEndian.Uint32(h[0:4]); length < recHeaderSize || length > maxRecordBytes || h[8] < recEntry || h[8] > recTruncate {
		return recHeader{}, false
	}
	if binary.LittleEndian.Uint32(h[4:8]) != headerCRC(h) {
		return recHeader{}, false
	}
	r := recHeader{
		length:  binary.LittleEndian.Uint32(h[0:4]),
		typ:     h[8],
		ledger:  int64(binary.LittleEndian.Uint64(h[12:20])),
		entry:   int64(binary.LittleEndian.Uint64(h[20:28])),
		lac:     int64(binary.LittleEndian.Uint64(h[28:36])),
		dataCRC: binary.LittleEndian.Uint32(h[36:40]),
	}
	return r, true
}
