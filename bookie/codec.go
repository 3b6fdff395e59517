package bookie

import (
	"google.golang.org/grpc/encoding"

	"github.com/meridianmq/meridian/internal/bufpool"
)

// Codec returns the protobuf codec the bookie serves with (internal/bufpool:
// gRPC's "proto" codec with buffers from BufferPool()). Clients sending
// large entries or batches benefit from dialing with
// grpc.WithDefaultCallOptions(grpc.ForceCodecV2(bookie.Codec())).
func Codec() encoding.CodecV2 { return bufpool.Codec() }
