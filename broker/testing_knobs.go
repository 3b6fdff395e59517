package broker

import (
	"sync"
	"time"
)

// TestingKnobs are injection points for tests (dragonboat's ExpertConfig
// idea). Production leaves every field zero; nothing here changes what the
// broker does unless a test sets it.
type TestingKnobs struct {
	// KeepAliveFreeze, while frozen, stops the metadata session keep-alive
	// loop before its next keep-alive, as a SIGSTOP of the process would:
	// the session expires and the broker's ownership claims vanish.
	KeepAliveFreeze *Freezer
	// TopicLoopFreeze, while frozen, stops every topic's background loop
	// (periodic cursor persists, retention) before its next round. Client
	// requests are still served, so a test can move a cursor in memory that
	// the frozen loop will try to persist when thawed.
	TopicLoopFreeze *Freezer
	// OnCursorPersist, when set, is called after every attempt to write a
	// subscription's cursor, with its outcome (nil: written). It must not
	// block.
	OnCursorPersist func(topic, subscription string, err error)
	// RefuseSend, when set, is asked before each producer send is stored;
	// a non-nil error refuses the send with that error (nothing stored),
	// as a quota would. It must not block.
	RefuseSend func(topic string) error
	// ReplRequestDelay, when set, is asked for each replication request a
	// stream from source region source receives for topic; the stream
	// waits that long before applying it (after noting the request, so the
	// source still counts as direct): a connected but slow origin.
	ReplRequestDelay func(topic, source string) time.Duration
}

// Freezer stops the goroutines that check it while it is frozen. The zero
// value is thawed; a nil *Freezer never blocks. Safe for concurrent use.
type Freezer struct {
	mu sync.Mutex
	// thawed is closed when the freezer thaws; nil while thawed.
	thawed chan struct{}
	// parked counts the goroutines blocked in wait.
	parked int
}

// Parked reports how many goroutines are blocked by f now. A test that
// froze a loop waits for Parked() > 0 to know the loop is not mid-round.
func (f *Freezer) Parked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked
}

// Freeze makes the next checks block until Thaw.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed == nil {
		f.thawed = make(chan struct{})
	}
}

// Thaw releases every blocked goroutine.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
}

// wait blocks while f is frozen, or until done is closed.
func (f *Freezer) wait(done <-chan struct{}) {
	if f == nil {
		return
	}
	f.mu.Lock()
	ch := f.thawed
	if ch != nil {
		f.parked++
	}
	f.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-done:
	}
	f.mu.Lock()
	f.parked--
	f.mu.Unlock()
}
