package bookie

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/meridianmq/meridian/internal/grpcbuf"
)

// BufferPool returns the gRPC buffer pool the bookie serves with (one
// shared instance, grpcbuf.Pool). Clients sending large entries benefit
// from dialing with experimental.WithBufferPool(bookie.BufferPool()).
func BufferPool() mem.BufferPool { return grpcbuf.Pool() }

// Codec returns the protobuf codec the bookie serves with (grpcbuf.Codec,
// buffers from BufferPool). Clients sending large entries or batches
// benefit from grpc.WithDefaultCallOptions(grpc.ForceCodecV2(bookie.Codec())).
func Codec() encoding.CodecV2 { return grpcbuf.Codec() }
