package metadata

import "sync"

// notifier wakes the watches of one shard on this node after the local
// replica applied changes. It holds no events: a woken watch reads the
// state machine's history from where it stopped, so a slow watch never
// blocks Update and never makes a queue grow.
type notifier struct {
	mu sync.Mutex
	// subs and closed are guarded by mu.
	subs   map[chan struct{}]struct{}
	closed bool
	done   chan struct{}
}

func newNotifier() *notifier {
	return &notifier{subs: map[chan struct{}]struct{}{}, done: make(chan struct{})}
}

// subscribe returns a channel that receives a token (coalesced, capacity 1)
// after every change, and a function to unsubscribe.
func (n *notifier) subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	n.mu.Lock()
	n.subs[c] = struct{}{}
	n.mu.Unlock()
	return c, func() {
		n.mu.Lock()
		delete(n.subs, c)
		n.mu.Unlock()
	}
}

// poke wakes every subscriber without blocking.
func (n *notifier) poke() {
	n.mu.Lock()
	for c := range n.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// close tells watches that the shard is gone from this node.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		close(n.done)
	}
}
