// Package bufpool is the gRPC buffer pool of Meridian's servers and
// clients: one tier per power of two from 256 B to 16 MiB, never zeroed.
package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is a gRPC mem.BufferPool with one tier per power of two from 256 B
// to 16 MiB that does not zero buffers. gRPC's default pool jumps from
// 32 KiB to 1 MiB and zeroes the whole capacity on every Get, so each
// 64 KiB message cost a 1 MiB memclr — a third of the bookie's CPU in the
// ledger benchmark, and of the broker's when it dispatches large batches to
// consumers. Zeroing is unnecessary: gRPC fills every byte of the length it
// asks for before reading it.
type Pool struct {
	tiers [25]sync.Pool // index = log2(capacity)
}

const (
	minPoolShift = 8
	maxPoolShift = 24
)

// Get returns a buffer of length n.
func (p *Pool) Get(n int) *[]byte {
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
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}

var _ mem.BufferPool = (*Pool)(nil)

var shared = &Pool{}

// Shared returns the process-wide pool: pass it to
// experimental.WithBufferPool (clients) or experimental.BufferPool (servers).
func Shared() *Pool { return shared }
