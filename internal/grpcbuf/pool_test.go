package grpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestPoolTiers(t *testing.T) {
	p := &bufferPool{}
	for _, tc := range []struct{ n, wantCap int }{{0, 0}, {1, 256}, {256, 256}, {257, 512}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1}} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.wantCap {
			t.Fatalf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.wantCap)
		}
		p.Put(b)
	}
	// A returned buffer is reused for a size of its tier (sync.Pool may
	// drop it, so only the shape is checked).
	b := p.Get(3000)
	(*b)[0] = 7
	p.Put(b)
	if c := p.Get(4096); len(*c) != 4096 || cap(*c) != 4096 {
		t.Fatalf("Get(4096) after Put: len %d cap %d", len(*c), cap(*c))
	}
	// Buffers not from a tier are not kept.
	odd := make([]byte, 300)
	p.Put(&odd)
	if c := p.Get(300); cap(*c) != 512 {
		t.Fatalf("an odd-capacity buffer was reused: cap %d", cap(*c))
	}
}

func TestCodecRoundTrip(t *testing.T) {
	c := Codec()
	if c.Name() != "proto" {
		t.Fatalf("codec name %q, want proto (wire compatible)", c.Name())
	}
	for _, n := range []int{10, 100 << 10} {
		in := wrapperspb.Bytes(bytes.Repeat([]byte{0xab}, n))
		data, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		std, _ := proto.Marshal(in)
		if !bytes.Equal(data.Materialize(), std) {
			t.Fatalf("%d bytes: encoding differs from proto.Marshal", n)
		}
		out := &wrapperspb.BytesValue{}
		if err := c.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		if !bytes.Equal(out.Value, in.Value) {
			t.Fatalf("%d bytes: round trip changed the payload", n)
		}
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a non-message succeeded")
	}
	if err := c.Unmarshal(mem.BufferSlice{}, new(int)); err == nil {
		t.Fatal("Unmarshal into a non-message succeeded")
	}
}
