package client

import "sync"

// dispatcher runs queued functions one at a time, in push order, on its
// own goroutine. It keeps user callbacks out of the producer's locks and
// I/O goroutines. Its queue holds at most one item per resolved batch plus
// one per flush waiter, both bounded by the producer's pending limit and
// its callers.
type dispatcher struct {
	mu     sync.Mutex
	q      []func()
	closed bool
	sig    chan struct{}
	done   chan struct{}
}

func newDispatcher() *dispatcher {
	return &dispatcher{sig: make(chan struct{}, 1), done: make(chan struct{})}
}

// push queues f. After close, f runs on the caller's goroutine.
func (d *dispatcher) push(f func()) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		f()
		return
	}
	d.q = append(d.q, f)
	d.mu.Unlock()
	select {
	case d.sig <- struct{}{}:
	default:
	}
}

// run executes queued functions until close has been called and the queue
// is empty.
func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		q := d.q
		d.q = nil
		closed := d.closed
		d.mu.Unlock()
		for _, f := range q {
			f()
		}
		if len(q) == 0 {
			if closed {
				return
			}
			<-d.sig
		}
	}
}

// close drains the queue and stops run; it waits for run to exit.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	select {
	case d.sig <- struct{}{}:
	default:
	}
	<-d.done
}
