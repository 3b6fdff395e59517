package wire

import (
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
)

// MaxUncompressedBytes bounds any decompressed batch (64 MiB): a corrupt or
// hostile size field must not make a reader allocate without limit. It is
// the absolute cap; a reader passes its own, smaller message size limit to
// DecompressLimit and DecodeBatchLimit.
const MaxUncompressedBytes = 64 << 20

// zstdMaxBlock is the format's Block_Maximum_Size: no zstd block decodes to
// more than 128 KiB, which is what makes zstdUpperBound a bound.
const zstdMaxBlock = 128 << 10

// zstdFirstCap and zstdGrowth shape the output buffer of a zstd decode. A
// frame can decode to tens of thousands of times its size, so the declared
// size is not believed up front: the first attempt gets room for 16× the
// input (at least 64 KiB), and each retry 4× more, never beyond the declared
// size. Typical batches (ratio < 16) decode in one pass; a highly
// compressible one costs at most a third more decoding work, and a frame
// that lies costs memory in proportion to what it really decodes to.
const (
	zstdFirstRatio = 16
	zstdFirstMin   = 64 << 10
	zstdGrowth     = 4
)

var (
	encOnce sync.Once
	zEnc    *zstd.Encoder
	decOnce sync.Once
	zDec    *zstd.Decoder
)

func zstdEncoder() *zstd.Encoder {
	encOnce.Do(func() {
		// EncodeAll is safe for concurrent use; one encoder serves everyone.
		zEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	})
	return zEnc
}

// zstdDecoder serves DecodeAll only (safe for concurrent use). With
// WithDecodeAllCapLimit the output never grows past cap(dst): that is how
// one decode is bounded by its own declared size rather than by the
// decoder-wide MaxUncompressedBytes.
func zstdDecoder() *zstd.Decoder {
	decOnce.Do(func() {
		zDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxUncompressedBytes), zstd.WithDecodeAllCapLimit(true))
	})
	return zDec
}

// Compress compresses data with codec.
func Compress(codec clientv1.CompressionType, data []byte) ([]byte, error) {
	switch codec {
	case clientv1.CompressionType_COMPRESSION_TYPE_NONE:
		return data, nil
	case clientv1.CompressionType_COMPRESSION_TYPE_ZSTD:
		return zstdEncoder().EncodeAll(data, make([]byte, 0, len(data)/2+64)), nil
	case clientv1.CompressionType_COMPRESSION_TYPE_S2:
		return s2.Encode(nil, data), nil
	}
	return nil, fmt.Errorf("%w: %d", ErrUnknownCompression, codec)
}

// Decompress is DecompressLimit with the absolute cap, MaxUncompressedBytes,
// as the limit.
func Decompress(codec clientv1.CompressionType, data []byte, uncompressedSize int64) ([]byte, error) {
	return DecompressLimit(codec, data, uncompressedSize, MaxUncompressedBytes)
}

// DecompressLimit reverses Compress. uncompressedSize is the declared size
// (EntryMetadata.uncompressed_size); limit is the reader's message size
// limit, itself capped at MaxUncompressedBytes.
//
//   - A declared size above the limit is refused (ErrTooLarge) before
//     anything is allocated.
//   - Input that decodes to more or fewer bytes than declared is ErrCorrupt.
//   - zstd: the frame and block headers are checked against the declared
//     size before decoding (a frame content size above it, or blocks that
//     cannot reach it, are ErrCorrupt), and the output grows as it decodes,
//     never past the declared size: a lying frame costs memory in proportion
//     to what it really holds.
//   - s2: the block format decodes into one buffer, so its header's decoded
//     length must equal the declared size and that much (at most the limit)
//     is allocated.
//   - NONE: the data is returned as is; its length must be within the limit.
func DecompressLimit(codec clientv1.CompressionType, data []byte, uncompressedSize, limit int64) ([]byte, error) {
	limit = min(max(limit, 0), MaxUncompressedBytes)
	if uncompressedSize < 0 || uncompressedSize > limit {
		return nil, fmt.Errorf("%w: uncompressed_size %d must be in [0, %d] (the message size limit)", ErrTooLarge, uncompressedSize, limit)
	}
	switch codec {
	case clientv1.CompressionType_COMPRESSION_TYPE_NONE:
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("%w: uncompressed payload is %d bytes, limit %d", ErrTooLarge, len(data), limit)
		}
		return data, nil
	case clientv1.CompressionType_COMPRESSION_TYPE_ZSTD:
		return zstdDecompress(data, uncompressedSize)
	case clientv1.CompressionType_COMPRESSION_TYPE_S2:
		n, err := s2.DecodedLen(data)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorrupt, err)
		}
		if int64(n) != uncompressedSize {
			return nil, fmt.Errorf("%w: s2 batch decodes to %d bytes, uncompressed_size declares %d", ErrCorrupt, n, uncompressedSize)
		}
		out, err := s2.Decode(make([]byte, n), data)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorrupt, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrUnknownCompression, codec)
}

// zstdDecompress decodes data, which must decode to exactly declared bytes.
func zstdDecompress(data []byte, declared int64) ([]byte, error) {
	upper, err := zstdUpperBound(data, uint64(declared))
	if err != nil {
		return nil, err
	}
	if upper < uint64(declared) {
		return nil, fmt.Errorf("%w: zstd blocks decode to at most %d bytes, uncompressed_size declares %d", ErrCorrupt, upper, declared)
	}
	c := min(declared, max(int64(len(data))*zstdFirstRatio, zstdFirstMin))
	for {
		out, err := zstdDecoder().DecodeAll(data, make([]byte, 0, c))
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) && c < declared {
			c = min(declared, c*zstdGrowth)
			continue
		}
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, fmt.Errorf("%w: zstd batch decodes to more than uncompressed_size %d", ErrCorrupt, declared)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if int64(len(out)) != declared {
			return nil, fmt.Errorf("%w: zstd batch decompressed to %d bytes, uncompressed_size declares %d", ErrCorrupt, len(out), declared)
		}
		return out, nil
	}
}

// zstdUpperBound walks the frame and block headers of data without decoding
// and returns the most bytes it can decode to: a raw or RLE block decodes to
// its Block_Size, a compressed block to at most zstdMaxBlock. A malformed or
// truncated header, or a frame whose Frame_Content_Size exceeds declared or
// what its blocks can produce, is ErrCorrupt. The walk is O(blocks) and
// allocates nothing.
func zstdUpperBound(data []byte, declared uint64) (uint64, error) {
	var total uint64
	for off := 0; off < len(data); {
		var h zstd.Header
		rest, err := h.DecodeAndStrip(data[off:])
		if err != nil {
			return 0, fmt.Errorf("%w: zstd frame header at byte %d: %v", ErrCorrupt, off, err)
		}
		if h.Skippable {
			if uint64(len(rest)) < uint64(h.SkippableSize) {
				return 0, fmt.Errorf("%w: zstd skippable frame at byte %d is truncated", ErrCorrupt, off)
			}
			off = len(data) - len(rest) + int(h.SkippableSize)
			continue
		}
		var frame uint64
		for last := false; !last; {
			if len(rest) < 3 {
				return 0, fmt.Errorf("%w: zstd block header at byte %d is truncated", ErrCorrupt, len(data)-len(rest))
			}
			bh := uint32(rest[0]) | uint32(rest[1])<<8 | uint32(rest[2])<<16
			rest = rest[3:]
			last = bh&1 != 0
			size := uint64(bh >> 3)
			if size > zstdMaxBlock {
				return 0, fmt.Errorf("%w: zstd block of %d bytes exceeds the format's %d", ErrCorrupt, size, zstdMaxBlock)
			}
			var in uint64
			switch (bh >> 1) & 3 {
			case 0: // raw: Block_Size bytes, copied
				in, frame = size, frame+size
			case 1: // RLE: one byte, repeated Block_Size times
				in, frame = 1, frame+size
			case 2: // compressed: Block_Size bytes in, at most a block out
				in, frame = size, frame+zstdMaxBlock
			default:
				return 0, fmt.Errorf("%w: zstd block at byte %d has the reserved type", ErrCorrupt, len(data)-len(rest)-3)
			}
			if uint64(len(rest)) < in {
				return 0, fmt.Errorf("%w: zstd block at byte %d is truncated", ErrCorrupt, len(data)-len(rest)-3)
			}
			rest = rest[in:]
		}
		if h.HasCheckSum {
			if len(rest) < 4 {
				return 0, fmt.Errorf("%w: zstd frame checksum is truncated", ErrCorrupt)
			}
			rest = rest[4:]
		}
		if h.HasFCS && h.FrameContentSize > declared {
			return 0, fmt.Errorf("%w: zstd frame content size %d exceeds uncompressed_size %d", ErrCorrupt, h.FrameContentSize, declared)
		}
		if h.HasFCS && h.FrameContentSize > frame {
			return 0, fmt.Errorf("%w: zstd frame content size %d, but its blocks decode to at most %d bytes", ErrCorrupt, h.FrameContentSize, frame)
		}
		total += frame
		off = len(data) - len(rest)
	}
	return total, nil
}

// EncodeBatch serializes and compresses a batch; it returns the payload for
// Send.payload and the uncompressed size.
func EncodeBatch(b *clientv1.Batch, codec clientv1.CompressionType) (payload []byte, uncompressedSize int64, err error) {
	raw, err := proto.Marshal(b)
	if err != nil {
		return nil, 0, fmt.Errorf("wire: marshal batch: %w", err)
	}
	out, err := Compress(codec, raw)
	if err != nil {
		return nil, 0, err
	}
	return out, int64(len(raw)), nil
}

// DecodeBatch is DecodeBatchLimit with MaxUncompressedBytes as the limit.
func DecodeBatch(md *clientv1.EntryMetadata, payload []byte) (*clientv1.Batch, error) {
	return DecodeBatchLimit(md, payload, MaxUncompressedBytes)
}

// DecodeBatchLimit decompresses and parses an entry payload described by
// md; limit bounds the declared uncompressed size (see DecompressLimit).
func DecodeBatchLimit(md *clientv1.EntryMetadata, payload []byte, limit int64) (*clientv1.Batch, error) {
	raw, err := DecompressLimit(md.GetCompression(), payload, md.GetUncompressedSize(), limit)
	if err != nil {
		return nil, err
	}
	b := &clientv1.Batch{}
	if err := proto.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrCorrupt, err)
	}
	if md.GetNumMessages() != 0 && int(md.GetNumMessages()) != len(b.Messages) {
		return nil, fmt.Errorf("%w: batch has %d messages, metadata says %d", ErrCorrupt, len(b.Messages), md.GetNumMessages())
	}
	return b, nil
}
