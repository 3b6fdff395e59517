package broker

import "sync"

// subSync is a topic's replicated-subscription shipping state: one sender
// per remote region (see subsync_send.go).
type subSync struct {
	// mu guards the fields below.
	mu      sync.Mutex
	senders map[string]*subSender
	closed  bool
}

// notify tells every sender that a replicated subscription changed.
func (ss *subSync) notify() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, x := range ss.senders {
		x.wakeup()
	}
}

// subSender ships a topic's replicated subscriptions to one remote region.
type subSender struct {
	wake chan struct{}
}

// wakeup asks the sender for a flush (non-blocking).
func (x *subSender) wakeup() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}
