package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
)

// Entry framing constants.
const (
	// Magic is the first byte of every stored entry ('M').
	Magic byte = 0x4D
	// Version is the current entry format version.
	Version byte = 1
	// HeaderSize is magic + version + uint32 metadata length.
	HeaderSize = 6
	// MaxMetadataBytes bounds the metadata section: metadata describes a
	// batch, it never carries data.
	MaxMetadataBytes = 64 << 10
)

// Errors returned by the decoders. Test with errors.Is.
var (
	// ErrCorrupt: the bytes are not a well-formed entry, batch or message ID.
	ErrCorrupt = errors.New("wire: corrupt")
	// ErrTooLarge: a size exceeds its limit (the text names it).
	ErrTooLarge = errors.New("wire: too large")
	// ErrUnknownCompression: the codec is not NONE, ZSTD or S2.
	ErrUnknownCompression = errors.New("wire: unknown compression")
)

// EncodeEntry frames metadata and payload as one stored entry.
func EncodeEntry(md *clientv1.EntryMetadata, payload []byte) ([]byte, error) {
	mb, err := proto.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("wire: marshal metadata: %w", err)
	}
	if len(mb) > MaxMetadataBytes {
		return nil, fmt.Errorf("%w: entry metadata is %d bytes, limit %d", ErrTooLarge, len(mb), MaxMetadataBytes)
	}
	out := make([]byte, HeaderSize+len(mb)+len(payload))
	out[0] = Magic
	out[1] = Version
	binary.BigEndian.PutUint32(out[2:6], uint32(len(mb)))
	copy(out[HeaderSize:], mb)
	copy(out[HeaderSize+len(mb):], payload)
	return out, nil
}

// DecodeEntry splits a stored entry into its metadata and payload. The
// payload aliases data.
func DecodeEntry(data []byte) (*clientv1.EntryMetadata, []byte, error) {
	if len(data) < HeaderSize {
		return nil, nil, fmt.Errorf("%w: entry of %d bytes is shorter than its %d-byte header", ErrCorrupt, len(data), HeaderSize)
	}
	if data[0] != Magic {
		return nil, nil, fmt.Errorf("%w: entry magic 0x%02x, want 0x%02x", ErrCorrupt, data[0], Magic)
	}
	if data[1] != Version {
		return nil, nil, fmt.Errorf("%w: entry format version %d, want %d", ErrCorrupt, data[1], Version)
	}
	n := binary.BigEndian.Uint32(data[2:6])
	if n > MaxMetadataBytes || int(n) > len(data)-HeaderSize {
		return nil, nil, fmt.Errorf("%w: metadata length %d does not fit in entry of %d bytes (limit %d)", ErrCorrupt, n, len(data), MaxMetadataBytes)
	}
	md := &clientv1.EntryMetadata{}
	if err := proto.Unmarshal(data[HeaderSize:HeaderSize+int(n)], md); err != nil {
		return nil, nil, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
	}
	return md, data[HeaderSize+int(n):], nil
}
