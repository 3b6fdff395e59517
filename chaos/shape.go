package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits of a link's shape.
const (
	// MaxSlowClose bounds Shape.SlowClose.
	MaxSlowClose = time.Minute
	// dropDelay is the retransmission delay of a "dropped" chunk: TCP
	// never loses bytes, it resends them after a retransmission timeout
	// (200 ms is Linux's minimum RTO), so a drop delays the chunk (and,
	// to keep the stream in order, every chunk behind it) by dropDelay
	// plus up to dropDelay of jitter.
	dropDelay = 200 * time.Millisecond
	// minBandwidthPiece is the smallest piece a rate-limited link writes
	// at once: pieces are a twentieth of a second's worth of bytes, so
	// that a slow link trickles instead of bursting a whole 32 KiB read
	// after a long wait.
	minBandwidthPiece = 512
)

// Shape is the degradation of one direction of a link, beyond latency
// and cuts. The zero Shape degrades nothing.
type Shape struct {
	// Bandwidth is the link's limit in bytes per second, shared by every
	// connection of the link (0: no limit).
	Bandwidth int64
	// Drop is the probability (0 to 1) that a chunk read from the source
	// is "lost" and retransmitted: delivered 200 ms (+ up to 200 ms of
	// jitter) late. Bytes are never lost and never reordered.
	Drop float64
	// SlowClose delays the end of a stream: once the source side closes,
	// the close (EOF) reaches the other side only after SlowClose. Bytes
	// read before the close are still delivered at once, and the other
	// direction keeps flowing.
	SlowClose time.Duration
}

// IsZero reports whether s degrades nothing.
func (s Shape) IsZero() bool { return s == Shape{} }

// Validate names the bad field and its limit.
func (s Shape) Validate() error {
	switch {
	case s.Bandwidth < 0:
		return fmt.Errorf("chaos: bandwidth %d must be >= 0 bytes/s", s.Bandwidth)
	case !(s.Drop >= 0 && s.Drop <= 1):
		return fmt.Errorf("chaos: drop %v must be in [0, 1]", s.Drop)
	case s.SlowClose < 0 || s.SlowClose > MaxSlowClose:
		return fmt.Errorf("chaos: slow close %v must be in [0, %v]", s.SlowClose, MaxSlowClose)
	}
	return nil
}

// bucket is a link's bandwidth limiter: a virtual clock of when the link
// is free again (a token bucket with a burst of one piece).
type bucket struct {
	mu   sync.Mutex
	free time.Time
}

// reserve books n bytes at rate bytes/s and returns when they have
// crossed the link.
func (b *bucket) reserve(n int, rate int64) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.free.Before(now) {
		b.free = now
	}
	b.free = b.free.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	return b.free
}

// shape returns the link's current shape.
func (l *linkState) shape() Shape {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shp
}

// dropDelayFor returns the extra delay of a chunk: dropDelay plus jitter
// with probability p, else 0.
func dropDelayFor(p float64) time.Duration {
	if p <= 0 || rand.Float64() >= p {
		return 0
	}
	return dropDelay + time.Duration(rand.Int64N(int64(dropDelay)+1))
}

// SetShape sets the shape of traffic from a to b, and from b to a unless
// oneway. It applies to bytes read after the call.
func (n *Network) SetShape(a, b string, s Shape, oneway bool) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ls := []*linkState{n.link(a, b)}
	if !oneway {
		ls = append(ls, n.link(b, a))
	}
	for _, l := range ls {
		l.mu.Lock()
		l.shp = s
		l.mu.Unlock()
	}
	n.log.Info("link shaped", "from", a, "to", b, "oneway", oneway, "bandwidth", s.Bandwidth, "drop", s.Drop, "slow_close", s.SlowClose)
	return nil
}

// Shape returns the shape of traffic from a to b.
func (n *Network) Shape(from, to string) Shape { return n.link(from, to).shape() }

// HealAll heals every cut and removes every shape; latencies stay.
func (n *Network) HealAll() {
	n.mu.Lock()
	var ps []pair
	for p := range n.links {
		ps = append(ps, p)
	}
	n.mu.Unlock()
	for _, p := range ps {
		l := n.link(p.from, p.to)
		l.mu.Lock()
		l.shp = Shape{}
		if l.cut.Swap(false) {
			close(l.healed)
			l.healed = make(chan struct{})
		}
		l.mu.Unlock()
	}
	n.log.Info("every link healed")
}

// LinkStatus is the state of one direction of a link.
type LinkStatus struct {
	From, To string
	Latency  time.Duration
	Jitter   time.Duration
	Cut      bool
	Shape
}

// IsDefault reports whether the link is in its initial state: no
// latency, not cut, not shaped.
func (s LinkStatus) IsDefault() bool {
	return s.Latency == 0 && s.Jitter == 0 && !s.Cut && s.Shape.IsZero()
}

// Links returns the state of every link that a proxy uses or a call has
// set, sorted by From then To.
func (n *Network) Links() []LinkStatus {
	n.mu.Lock()
	ps := map[pair]bool{}
	for p := range n.links {
		ps[p] = true
	}
	for _, x := range n.proxies {
		ps[pair{x.From, x.To}] = true
		ps[pair{x.To, x.From}] = true
	}
	n.mu.Unlock()
	out := make([]LinkStatus, 0, len(ps))
	for p := range ps {
		l := n.link(p.from, p.to)
		out = append(out, LinkStatus{
			From: p.from, To: p.to,
			Latency: time.Duration(l.latency.Load()), Jitter: time.Duration(l.jitter.Load()),
			Cut: l.cut.Load(), Shape: l.shape(),
		})
	}
	slices.SortFunc(out, func(a, b LinkStatus) int {
		if c := strings.Compare(a.From, b.From); c != 0 {
			return c
		}
		return strings.Compare(a.To, b.To)
	})
	return out
}
