package metadata

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Clock is a node's source of wall-clock time. The node reads it to stamp
// its proposals and, as a shard leader, to decide when sessions are due and
// to propose the session clock (see the tick command). Implementations must
// be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock returns the real wall clock, the default Clock.
func SystemClock() Clock { return systemClock{} }

// MaxClockSkewInjection bounds the skew SkewClock accepts.
const MaxClockSkewInjection = time.Hour

// SkewClock is a Clock that reads another one plus an offset that can be
// changed at any time: the clock seam of a node run with fault_injection
// (POST /debug/clock). Safe for concurrent use.
type SkewClock struct {
	base Clock
	skew atomic.Int64 // nanoseconds
}

// NewSkewClock returns base (SystemClock() when nil) with no skew.
func NewSkewClock(base Clock) *SkewClock {
	if base == nil {
		base = SystemClock()
	}
	return &SkewClock{base: base}
}

// Now implements Clock.
func (c *SkewClock) Now() time.Time { return c.base.Now().Add(c.Skew()) }

// Skew returns the current offset.
func (c *SkewClock) Skew() time.Duration { return time.Duration(c.skew.Load()) }

// SetSkew sets the offset (negative: the clock runs behind). It refuses an
// offset beyond ±MaxClockSkewInjection.
func (c *SkewClock) SetSkew(d time.Duration) error {
	if d > MaxClockSkewInjection || d < -MaxClockSkewInjection {
		return fmt.Errorf("metadata: skew %v out of range [-%v, %v]", d, MaxClockSkewInjection, MaxClockSkewInjection)
	}
	c.skew.Store(int64(d))
	return nil
}
