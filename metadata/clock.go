package metadata

import "time"

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
