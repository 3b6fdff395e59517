package bookie

import (
	"google.golang.org/grpc/mem"

	"github.com/meridianmq/meridian/internal/bufpool"
)

// BufferPool returns the gRPC buffer pool the bookie serves with (one
// shared instance, internal/bufpool: power-of-two tiers, not zeroed).
// Clients sending large entries benefit from dialing with
// experimental.WithBufferPool(bookie.BufferPool()); a process may install it
// globally with experimental.SetDefaultBufferPool, as `meridian bookie` does.
func BufferPool() mem.BufferPool { return sharedPool }

var sharedPool = bufpool.Shared()
