package wire

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
)

// MaxUncompressedBytes bounds any decompressed batch (64 MiB): a corrupt or
// hostile size field must not make a reader allocate without limit.
const MaxUncompressedBytes = 64 << 20

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

func zstdDecoder() *zstd.Decoder {
	decOnce.Do(func() {
		zDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxUncompressedBytes))
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

// Decompress reverses Compress. uncompressedSize is the declared size; the
// result may not exceed it nor MaxUncompressedBytes.
func Decompress(codec clientv1.CompressionType, data []byte, uncompressedSize int64) ([]byte, error) {
	if uncompressedSize < 0 || uncompressedSize > MaxUncompressedBytes {
		return nil, fmt.Errorf("%w: uncompressed_size %d, limit %d", ErrTooLarge, uncompressedSize, MaxUncompressedBytes)
	}
	switch codec {
	case clientv1.CompressionType_COMPRESSION_TYPE_NONE:
		return data, nil
	case clientv1.CompressionType_COMPRESSION_TYPE_ZSTD:
		r := zstdDecoder()
		out, err := r.DecodeAll(data, make([]byte, 0, uncompressedSize))
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if int64(len(out)) != uncompressedSize {
			return nil, fmt.Errorf("%w: zstd batch decompressed to %d bytes, declared %d", ErrCorrupt, len(out), uncompressedSize)
		}
		return out, nil
	case clientv1.CompressionType_COMPRESSION_TYPE_S2:
		n, err := s2.DecodedLen(data)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorrupt, err)
		}
		if int64(n) != uncompressedSize {
			return nil, fmt.Errorf("%w: s2 batch decodes to %d bytes, declared %d", ErrCorrupt, n, uncompressedSize)
		}
		out, err := s2.Decode(make([]byte, n), data)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorrupt, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrUnknownCompression, codec)
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

// DecodeBatch decompresses and parses an entry payload described by md.
func DecodeBatch(md *clientv1.EntryMetadata, payload []byte) (*clientv1.Batch, error) {
	raw, err := Decompress(md.GetCompression(), payload, md.GetUncompressedSize())
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
