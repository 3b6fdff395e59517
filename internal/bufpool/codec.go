package bufpool

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's protobuf codec ("proto", wire compatible) with its
// buffers taken from Shared() instead of gRPC's default pool: the standard
// codec always uses the process-wide default pool, which zeroes a 1 MiB
// buffer for every message between 32 KiB and 1 MiB (each 64 KiB entry,
// each batch of adds, each dispatched batch of messages).
type codec struct{}

// Codec returns the protobuf codec with buffers from Shared(): servers
// pass it to grpc.ForceServerCodecV2, clients to
// grpc.WithDefaultCallOptions(grpc.ForceCodecV2(...)).
func Codec() encoding.CodecV2 { return codec{} }

// Marshal encodes v, a protobuf message.
func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("codec: cannot marshal %T: not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // safe: Size just ran
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := shared.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		shared.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, shared)}, nil
}

// Unmarshal decodes data into v, a protobuf message.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("codec: cannot unmarshal into %T: not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(shared)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// Name is "proto": the codec is wire compatible with gRPC's.
func (codec) Name() string { return "proto" }
