package broker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/meridianmq/meridian/topology"
)

// noSpareBookie reports whether a region with writable bookies has none to
// spare for an ensemble change at ensemble size e. Then, with Qw = Qa, any
// single bookie outage stops the writes of every ledger on it until the
// bookie returns (a ledger cannot replace a member without a spare), and
// the broker logs a warning per failed write.
func noSpareBookie(writable, e int) bool { return e >= writable }

// warnNoSpareBookie logs a warning at start when the region has no spare
// writable bookie for the default ensemble size (best effort: a registry
// that cannot be read is only logged at debug).
func (s *Server) warnNoSpareBookie(ctx context.Context) {
	bs, _, err := topology.ListBookies(ctx, s.cfg.Regional, s.log)
	if err != nil {
		s.log.Debug("cannot list bookies for the spare check", "err", err)
		return
	}
	writable := 0
	for _, b := range bs {
		if !b.ReadOnly {
			writable++
		}
	}
	if e := s.cfg.DefaultEnsembleSize; noSpareBookie(writable, e) {
		s.log.Warn("no spare bookie for an ensemble change: any single bookie outage stops writes to its ledgers until it returns; add a bookie or lower default_ensemble_size",
			"writable_bookies", writable, "default_ensemble_size", e,
			"default_write_quorum", s.cfg.DefaultWriteQuorum, "default_ack_quorum", s.cfg.DefaultAckQuorum)
	}
}

// warnEvery lets one warning of a kind through per interval and counts the
// ones it held back, so an outage that repeats a warning for every topic
// and request (e.g. "taking the topic") logs a few lines, not hundreds.
// Safe for concurrent use.
type warnEvery struct {
	interval time.Duration

	// mu guards the fields below.
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs msg with args unless a warning went out less than interval
// ago; the next one that does go out carries "suppressed", the count of
// those held back since.
func (w *warnEvery) warn(log *slog.Logger, msg string, args ...any) {
	w.mu.Lock()
	now := time.Now()
	if !w.last.IsZero() && now.Sub(w.last) < w.interval {
		w.suppressed++
		w.mu.Unlock()
		return
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	w.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Warn(msg, args...)
}
