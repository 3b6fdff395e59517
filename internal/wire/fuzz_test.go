package wire

import (
	"bytes"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
)

// fuzzLimit is the reader limit the fuzz targets decode with: small enough
// that a run never holds much, large enough for every seed.
const fuzzLimit = 1 << 20

func seedEntry(f *testing.F, codec clientv1.CompressionType) []byte {
	b := &clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: bytes.Repeat([]byte("ab"), 300), Properties: map[string]string{"p": "v"}}, {Payload: []byte("x")}}}
	payload, size, err := EncodeBatch(b, codec)
	if err != nil {
		f.Fatal(err)
	}
	ent, err := EncodeEntry(&clientv1.EntryMetadata{ProducerName: "p", SequenceId: 9, NumMessages: 2, Compression: codec, UncompressedSize: size, OriginRegion: "r"}, payload)
	if err != nil {
		f.Fatal(err)
	}
	return ent
}

// FuzzDecodeEntry: a stored or replicated entry of any bytes decodes or
// fails cleanly; a decoded entry re-encodes to an entry that decodes the
// same; its batch, when it decodes, holds no more than the declared size
// and survives EncodeBatch/DecodeBatch.
func FuzzDecodeEntry(f *testing.F) {
	for _, c := range []clientv1.CompressionType{codecNone, codecZstd, codecS2} {
		f.Add(seedEntry(f, c))
	}
	f.Add([]byte{Magic, Version, 0, 0, 0, 0})
	f.Add([]byte{Magic, Version, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		md, payload, err := DecodeEntry(data)
		if err != nil {
			return
		}
		again, err := EncodeEntry(md, payload)
		if err != nil {
			t.Fatalf("decoded entry does not re-encode: %v", err)
		}
		md2, p2, err := DecodeEntry(again)
		if err != nil || !proto.Equal(md, md2) || !bytes.Equal(payload, p2) {
			t.Fatalf("re-encoded entry decodes differently: %v", err)
		}
		b, err := DecodeBatchLimit(md, payload, fuzzLimit)
		if err != nil {
			return
		}
		p3, size, err := EncodeBatch(b, md.GetCompression())
		if err != nil {
			t.Fatalf("decoded batch does not re-encode: %v", err)
		}
		b2, err := DecodeBatchLimit(&clientv1.EntryMetadata{Compression: md.GetCompression(), UncompressedSize: size}, p3, MaxUncompressedBytes)
		if err != nil || !proto.Equal(b, b2) {
			t.Fatalf("re-encoded batch decodes differently: %v", err)
		}
	})
}

// FuzzDecompress: every codec, any bytes, any declared size: no panic;
// success means exactly the declared size (never above the limit), and the
// output compresses and decompresses back to itself.
func FuzzDecompress(f *testing.F) {
	text := bytes.Repeat([]byte("meridian "), 200)
	for _, c := range []clientv1.CompressionType{codecNone, codecZstd, codecS2} {
		out, _ := Compress(c, text)
		f.Add(uint8(c), out, int64(len(text)))
		f.Add(uint8(c), out, int64(MaxUncompressedBytes))
	}
	f.Add(uint8(codecZstd), zstdFrame(MaxUncompressedBytes, zstdBlock(true, 0, 4, []byte("abcd"))), int64(MaxUncompressedBytes))
	f.Add(uint8(codecZstd), zstdFrame(-1, zstdBlock(false, 1, 128<<10, []byte{'z'}), zstdBlock(true, 1, 10, []byte{'z'})), int64(128<<10+10))
	f.Add(uint8(codecZstd), []byte{}, int64(0))
	f.Fuzz(func(t *testing.T, c uint8, data []byte, declared int64) {
		codec := clientv1.CompressionType(c % 4)
		out, err := DecompressLimit(codec, data, declared, fuzzLimit)
		if err != nil {
			return
		}
		if codec != codecNone && int64(len(out)) != declared {
			t.Fatalf("decoded %d bytes, declared %d", len(out), declared)
		}
		if len(out) > fuzzLimit {
			t.Fatalf("decoded %d bytes past the %d limit", len(out), fuzzLimit)
		}
		re, err := Compress(codec, out)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecompressLimit(codec, re, int64(len(out)), fuzzLimit)
		if err != nil || !bytes.Equal(back, out) {
			t.Fatalf("round trip of the decoded bytes: %v", err)
		}
	})
}

// FuzzParseMessageID: any text parses or fails cleanly; a parsed ID
// formats to text that parses to the same ID, and formatting is stable.
func FuzzParseMessageID(f *testing.F) {
	for _, s := range []string{"12:34:5", "0:0", "9223372036854775807:9223372036854775807:2147483647", "-1:0:0", "1:2:3:4", "01:+2:0", "", ":", "1::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseMessageID(s)
		if err != nil {
			return
		}
		if id.GetLedgerId() < 0 || id.GetEntryId() < 0 || id.GetBatchIndex() < 0 {
			t.Fatalf("%q parsed to a negative ID %v", s, id)
		}
		text := FormatMessageID(id)
		id2, err := ParseMessageID(text)
		if err != nil || !proto.Equal(id, id2) {
			t.Fatalf("%q -> %q does not parse back: %v", s, text, err)
		}
		if FormatMessageID(id2) != text {
			t.Fatalf("format not stable: %q", text)
		}
	})
}
