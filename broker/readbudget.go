package broker

import (
	"context"
	"sync"
)

// Dispatch read budget (issue 22). A dispatch round reads up to 100
// entries at once (tail cache, else bookies); 200 never-read consumers of
// one backlog of 64 KiB entries read 6.4 MiB each at the same moment,
// before any delivery budget could fill, and the broker (with the bookie
// in the same process) reached 3–4 GiB of RSS. Two bounds, as in Pulsar:
//
//   - a round reads at most about dispatcher_max_read_bytes (default
//     5 MiB, Pulsar's dispatcherMaxReadSizeBytes), estimated from the mean
//     entry size of the subscription's last read (the first read of a
//     subscription reads one entry);
//   - the rounds of the whole broker hold at most
//     max_inflight_dispatch_read_bytes (default 64 MiB) of such estimates
//     at once: a round waits, off every lock, until its estimate fits, and
//     gives it back when its entries are delivered (from then on the
//     delivery budgets hold them) or dropped.
//
// The estimate is what is reserved: a read whose entries are larger than
// the last read's mean holds more than it reserved, by at most its 100
// entries.

// hold takes n bytes, waiting while they do not fit, and returns the
// function that gives them back (at most once).
func (b *byteBudget) hold(ctx context.Context, n int64) (func(), error) {
	if err := b.acquire(ctx, n); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }, nil
}

// readSize is readSizeLocked under s.mu.
func (s *subscription) readSize(most int64) (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readSizeLocked(most)
}

// readSizeLocked returns how many entries (at most most) the next read
// takes and the bytes it reserves for them. Needs s.mu.
func (s *subscription) readSizeLocked(most int64) (int, int64) {
	if most < 1 {
		return 0, 0
	}
	cfg := &s.t.b.cfg
	if s.avgEntry <= 0 {
		return 1, int64(cfg.MaxMessageBytes) // unknown size: one entry, at most a message
	}
	n := min(most, max(1, cfg.DispatcherMaxReadBytes/s.avgEntry))
	return int(n), n * s.avgEntry
}

// noteRead records the mean entry size of a dispatch read.
func (s *subscription) noteRead(ents []LedgerEntry) {
	if len(ents) == 0 {
		return
	}
	var sum int64
	for _, e := range ents {
		sum += int64(len(e.Data))
	}
	s.mu.Lock()
	s.avgEntry = max(1, sum/int64(len(ents)))
	s.mu.Unlock()
}
