// Package grpcbuf holds the gRPC buffer pool every Meridian server and
// client uses for its messages.
package grpcbuf

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// bufferPool is a gRPC mem.BufferPool with one tier per power of two from
// 256 B to 16 MiB that does not zero buffers. gRPC's default pool jumps
// from 32 KiB to 1 MiB and zeroes the whole capacity on every Get, so each
// 64 KiB entry cost a 1 MiB memclr — a third of the bookie's CPU in the
// benchmark, and 8 % of a standalone's at 111 000 msg/s of 1 KiB messages
// (batches of ~117 KiB from every producer). Zeroing is unnecessary here: gRPC fills every byte of the
// length it asks for before reading it.
type bufferPool struct {
	tiers [25]sync.Pool // index = log2(capacity)
}

const (
	minPoolShift = 8
	maxPoolShift = 24
)

// Get returns a buffer of length n.
func (p *bufferPool) Get(n int) *[]byte {
	if n <= 0 {
		b := []byte{}
		return &b
	}
	shift := max(bits.Len(uint(n-1)), minPoolShift)
	if shift > maxPoolShift {
		b := make([]byte, n)
		return &b
	}
	if v := p.tiers[shift].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<shift)
	return &b
}

// Put returns a buffer obtained from Get.
func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}

var _ mem.BufferPool = (*bufferPool)(nil)

// Pool returns the shared pool. Servers take it with
// experimental.BufferPool, clients with experimental.WithBufferPool; a
// process may install it globally with experimental.SetDefaultBufferPool.
func Pool() mem.BufferPool { return sharedPool }

var sharedPool = &bufferPool{}
