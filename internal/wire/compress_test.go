package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

const (
	codecNone = clientv1.CompressionType_COMPRESSION_TYPE_NONE
	codecZstd = clientv1.CompressionType_COMPRESSION_TYPE_ZSTD
	codecS2   = clientv1.CompressionType_COMPRESSION_TYPE_S2
)

// allocPerRun is the mean of the bytes allocated by f over runs calls
// (runtime.MemStats.TotalAlloc, so it counts what was asked for, touched or
// not).
func allocPerRun(runs int, f func()) uint64 {
	f() // warm up pooled codecs
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// zstdFrame builds a zstd frame by hand: a frame header (single segment with
// a 4-byte Frame_Content_Size when fcs >= 0, else a 128 KiB window and no
// content size) and the given blocks, each already framed by zstdBlock.
func zstdFrame(fcs int64, blocks ...[]byte) []byte {
	out := []byte{0x28, 0xB5, 0x2F, 0xFD}
	if fcs >= 0 {
		out = append(out, 0xA0) // FCS_Flag 2 (4 bytes), Single_Segment
		out = binary.LittleEndian.AppendUint32(out, uint32(fcs))
	} else {
		out = append(out, 0x00, (17-10)<<3) // no FCS; Window_Descriptor 2^17
	}
	for _, b := range blocks {
		out = append(out, b...)
	}
	return out
}

// zstdBlock frames one block: typ 0 raw (content is the data), 1 RLE
// (content is one byte, size the repeat count).
func zstdBlock(last bool, typ uint32, size int, content []byte) []byte {
	h := typ<<1 | uint32(size)<<3
	if last {
		h |= 1
	}
	return append([]byte{byte(h), byte(h >> 8), byte(h >> 16)}, content...)
}

// TestDecompressLyingSizeAllocatesLittle: a small zstd frame whose declared
// uncompressed_size (and, forged, its own frame content size) says 64 MiB
// is refused as corrupt without allocating anything near 64 MiB. The old
// code preallocated the declared size: 64 MiB per call.
func TestDecompressLyingSizeAllocatesLittle(t *testing.T) {
	small := make([]byte, 100)
	for i := range small {
		small[i] = byte(rand.Uint32())
	}
	real100, _ := Compress(codecZstd, small)
	forged := zstdFrame(MaxUncompressedBytes, zstdBlock(true, 0, len(small), small))
	// 512 RLE blocks of 128 KiB: 2 KiB of input that really decodes to
	// 64 MiB, declared as 1 KiB.
	var rle [][]byte
	for i := range 512 {
		rle = append(rle, zstdBlock(i == 511, 1, 128<<10, []byte{'z'}))
	}
	bomb := zstdFrame(-1, rle...)

	cases := []struct {
		name     string
		data     []byte
		declared int64
		max      uint64 // generous bound on bytes allocated per call
	}{
		{"real 100-byte frame, declared 64 MiB", real100, MaxUncompressedBytes, 1 << 20},
		{"forged content size 64 MiB", forged, MaxUncompressedBytes, 1 << 20},
		{"RLE bomb declared 1 KiB", bomb, 1 << 10, 1 << 20},
		// The lie only shows once the output passes the declared size: the
		// buffer grows 64 KiB, 256 KiB, 1 MiB (each overrun by the block
		// that did not fit), about 2.5× declared in all.
		{"RLE bomb declared 1 MiB", bomb, 1 << 20, 8 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.data) > 4<<10 {
				t.Fatalf("crafted input is %d bytes", len(c.data))
			}
			var err error
			n := allocPerRun(5, func() { _, err = Decompress(codecZstd, c.data, c.declared) })
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if n > c.max {
				t.Fatalf("decoding %d bytes allocated %d bytes per call, want < %d", len(c.data), n, c.max)
			}
			t.Logf("%d bytes in, %d bytes allocated per call: %v", len(c.data), n, err)
		})
	}
}

// TestDecompressLimitRefusesDeclaredSize: a declared size above the
// reader's limit is refused before any allocation, naming the field and the
// limit, for every codec.
func TestDecompressLimitRefusesDeclaredSize(t *testing.T) {
	const limit = 5 << 20
	frame, _ := Compress(codecZstd, []byte("hello"))
	for _, codec := range []clientv1.CompressionType{codecNone, codecZstd, codecS2} {
		var err error
		n := allocPerRun(5, func() { _, err = DecompressLimit(codec, frame, limit+1, limit) })
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "uncompressed_size") || !strings.Contains(err.Error(), "5242880") {
			t.Fatalf("%v: err = %v, want ErrTooLarge naming uncompressed_size and 5242880", codec, err)
		}
		if n > 4<<10 {
			t.Fatalf("%v: refusal allocated %d bytes", codec, n)
		}
	}
	// A limit above the absolute cap is clamped to it.
	if _, err := DecompressLimit(codecZstd, frame, MaxUncompressedBytes+1, 1<<40); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("clamp: %v", err)
	}
	// NONE: the payload itself must fit.
	if _, err := DecompressLimit(codecNone, make([]byte, 2048), 0, 1024); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("none: %v", err)
	}
	md := &clientv1.EntryMetadata{Compression: codecZstd, UncompressedSize: limit + 1}
	if _, err := DecodeBatchLimit(md, frame, limit); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("DecodeBatchLimit: %v", err)
	}
}

// TestDecompressFrameLies: frames that decode to fewer or more bytes than
// declared, or whose headers cannot be right, are ErrCorrupt.
func TestDecompressFrameLies(t *testing.T) {
	data := bytes.Repeat([]byte("meridian "), 1000)
	z, _ := Compress(codecZstd, data)
	s, _ := Compress(codecS2, data)
	for _, c := range []struct {
		name     string
		codec    clientv1.CompressionType
		data     []byte
		declared int64
	}{
		{"zstd short", codecZstd, z, int64(len(data)) + 1},
		{"zstd long", codecZstd, z, int64(len(data)) - 1},
		{"zstd truncated", codecZstd, z[:len(z)-3], int64(len(data))},
		{"zstd trailing garbage", codecZstd, append(append([]byte{}, z...), 1, 2, 3), int64(len(data))},
		{"zstd reserved block", codecZstd, zstdFrame(-1, zstdBlock(true, 3, 0, nil)), 0},
		{"zstd oversized block", codecZstd, zstdFrame(-1, zstdBlock(true, 1, 200<<10, []byte{1})), 200 << 10},
		{"zstd fcs above blocks", codecZstd, zstdFrame(10, zstdBlock(true, 0, 4, []byte("abcd"))), 10},
		{"s2 short", codecS2, s, int64(len(data)) + 1},
		{"s2 truncated", codecS2, s[:len(s)-3], int64(len(data))},
	} {
		if _, err := Decompress(c.codec, c.data, c.declared); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", c.name, err)
		}
	}
}

// TestDecompressRoundTripSizes: honest frames of every shape decode,
// including ones compressible far beyond the first buffer's 16× (the grow
// and retry path) and hand-built raw and RLE frames.
func TestDecompressRoundTripSizes(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{nil, {}, []byte("x"), make([]byte, 10<<20), bytes.Repeat([]byte("abc"), 1<<20)}
	for _, n := range []int{1, 100, 4096, 200 << 10, 3 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.IntN(4))
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		for _, codec := range []clientv1.CompressionType{codecNone, codecZstd, codecS2} {
			c, err := Compress(codec, in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decompress(codec, c, int64(len(in)))
			if err != nil {
				t.Fatalf("%v %d bytes: %v", codec, len(in), err)
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("%v %d bytes: round trip differs", codec, len(in))
			}
		}
	}
	raw := zstdFrame(4, zstdBlock(true, 0, 4, []byte("abcd")))
	if out, err := Decompress(codecZstd, raw, 4); err != nil || string(out) != "abcd" {
		t.Fatalf("raw frame: %q %v", out, err)
	}
	rle := zstdFrame(-1, zstdBlock(false, 1, 128<<10, []byte{'q'}), zstdBlock(true, 1, 5, []byte{'q'}))
	if out, err := Decompress(codecZstd, rle, 128<<10+5); err != nil || !bytes.Equal(out, bytes.Repeat([]byte{'q'}, 128<<10+5)) {
		t.Fatalf("rle frame: %d %v", len(out), err)
	}
	// Two concatenated frames decode to their sum.
	a, _ := Compress(codecZstd, []byte("hello "))
	b, _ := Compress(codecZstd, []byte("world"))
	if out, err := Decompress(codecZstd, append(a, b...), 11); err != nil || string(out) != "hello world" {
		t.Fatalf("two frames: %q %v", out, err)
	}
}
