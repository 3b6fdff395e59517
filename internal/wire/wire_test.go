package wire

import (
	"bytes"
	"errors"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

func TestEntryRoundTripEachCodec(t *testing.T) {
	for _, codec := range []clientv1.CompressionType{
		clientv1.CompressionType_COMPRESSION_TYPE_NONE,
		clientv1.CompressionType_COMPRESSION_TYPE_ZSTD,
		clientv1.CompressionType_COMPRESSION_TYPE_S2,
	} {
		b := &clientv1.Batch{Messages: []*clientv1.SingleMessage{
			{Key: "k0", Payload: bytes.Repeat([]byte("a"), 1000), Properties: map[string]string{"p": "v"}},
			{Key: "k1", Payload: []byte("second"), EventTimeMs: 7},
		}}
		payload, size, err := EncodeBatch(b, codec)
		if err != nil {
			t.Fatal(err)
		}
		md := &clientv1.EntryMetadata{ProducerName: "p", SequenceId: 5, NumMessages: 2, Compression: codec, UncompressedSize: size, OriginRegion: "r1"}
		ent, err := EncodeEntry(md, payload)
		if err != nil {
			t.Fatal(err)
		}
		md2, p2, err := DecodeEntry(ent)
		if err != nil {
			t.Fatal(err)
		}
		if md2.GetProducerName() != "p" || md2.GetSequenceId() != 5 || md2.GetOriginRegion() != "r1" {
			t.Fatalf("metadata mismatch: %v", md2)
		}
		b2, err := DecodeBatch(md2, p2)
		if err != nil {
			t.Fatalf("%v: %v", codec, err)
		}
		if len(b2.Messages) != 2 || b2.Messages[1].Key != "k1" || string(b2.Messages[1].Payload) != "second" || b2.Messages[0].Properties["p"] != "v" {
			t.Fatalf("batch mismatch: %v", b2)
		}
	}
}

func TestDecodeRejectsCorruptAndOversize(t *testing.T) {
	if _, _, err := DecodeEntry([]byte{1, 2}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short: %v", err)
	}
	if _, _, err := DecodeEntry([]byte{Magic, Version, 0xff, 0, 0, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad length: %v", err)
	}
	if _, _, err := DecodeEntry([]byte{'X', Version, 0, 0, 0, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad magic: %v", err)
	}
	if _, err := Decompress(clientv1.CompressionType_COMPRESSION_TYPE_ZSTD, nil, MaxUncompressedBytes+1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	big, _ := Compress(clientv1.CompressionType_COMPRESSION_TYPE_S2, make([]byte, 4096))
	if _, err := Decompress(clientv1.CompressionType_COMPRESSION_TYPE_S2, big, 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lying size: %v", err)
	}
	if _, err := Compress(clientv1.CompressionType(9), nil); !errors.Is(err, ErrUnknownCompression) {
		t.Fatalf("codec: %v", err)
	}
}

func TestMessageIDText(t *testing.T) {
	id, err := ParseMessageID("12:34:5")
	if err != nil || id.LedgerId != 12 || id.EntryId != 34 || id.BatchIndex != 5 {
		t.Fatalf("%v %v", id, err)
	}
	if FormatMessageID(id) != "12:34:5" {
		t.Fatal(FormatMessageID(id))
	}
	for _, bad := range []string{"", "1", "a:b:c", "1:2:3:4", "-1:2:0", "1:2:x"} {
		if _, err := ParseMessageID(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}
