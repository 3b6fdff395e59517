package chaos

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Network is the set of link proxies between endpoints: regions ("a") or
// processes ("a/broker-0"), any string naming one side of a link. Traffic
// from A to an endpoint of B goes through a proxy made by Proxy(A, B,
// listen, target); the Network then delays it by the A→B one-way latency
// (plus jitter), shapes it (SetShape: bandwidth, drop, slow close) and can
// cut it, in one direction or both.
//
// A cut stalls bytes instead of dropping them, as a partition does to TCP:
// connections stay open and carry on after a heal unless an endpoint gives
// up first (gRPC keepalive), and a connection opened during a cut does not
// reach its target until the heal.
type Network struct {
	log *slog.Logger

	mu      sync.Mutex
	links   map[pair]*linkState
	proxies []*Proxy
	closed  bool
}

type pair struct{ from, to string }

// linkState is the one-way state of traffic from one region to another.
type linkState struct {
	latency atomic.Int64 // ns
	jitter  atomic.Int64 // ns
	cut     atomic.Bool
	bw      bucket
	// mu guards healed and shp.
	mu     sync.Mutex
	healed chan struct{} // closed and replaced on heal
	shp    Shape
}

// NewNetwork returns an empty network; log may be nil.
func NewNetwork(log *slog.Logger) *Network {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Network{log: log, links: map[pair]*linkState{}}
}

func (n *Network) link(from, to string) *linkState {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.links[pair{from, to}]
	if l == nil {
		l = &linkState{healed: make(chan struct{})}
		n.links[pair{from, to}] = l
	}
	return l
}

// SetLatency sets the one-way latency and jitter of traffic between a and
// b, both ways. It applies to bytes read after the call.
func (n *Network) SetLatency(a, b string, latency, jitter time.Duration) error {
	if latency < 0 || jitter < 0 {
		return fmt.Errorf("chaos: latency %v and jitter %v must not be negative", latency, jitter)
	}
	for _, l := range []*linkState{n.link(a, b), n.link(b, a)} {
		l.latency.Store(int64(latency))
		l.jitter.Store(int64(jitter))
	}
	n.log.Info("link latency set", "a", a, "b", b, "latency", latency, "jitter", jitter)
	return nil
}

// Latency returns the one-way latency and jitter from a to b.
func (n *Network) Latency(from, to string) (time.Duration, time.Duration) {
	l := n.link(from, to)
	return time.Duration(l.latency.Load()), time.Duration(l.jitter.Load())
}

// Cut stops traffic from a to b, and from b to a unless oneway.
func (n *Network) Cut(a, b string, oneway bool) {
	n.link(a, b).cut.Store(true)
	if !oneway {
		n.link(b, a).cut.Store(true)
	}
	n.log.Info("link cut", "from", a, "to", b, "oneway", oneway)
}

// Heal restores traffic between a and b, both ways.
func (n *Network) Heal(a, b string) {
	for _, l := range []*linkState{n.link(a, b), n.link(b, a)} {
		l.mu.Lock()
		if l.cut.Swap(false) {
			close(l.healed)
			l.healed = make(chan struct{})
		}
		l.mu.Unlock()
	}
	n.log.Info("link healed", "a", a, "b", b)
}

// IsCut reports whether traffic from a to b is cut.
func (n *Network) IsCut(from, to string) bool { return n.link(from, to).cut.Load() }

// waitOpen blocks while the link is cut, until it heals or done closes.
// It reports whether the link is open.
func (l *linkState) waitOpen(done <-chan struct{}) bool {
	for {
		l.mu.Lock()
		cut, healed := l.cut.Load(), l.healed
		l.mu.Unlock()
		if !cut {
			return true
		}
		select {
		case <-healed:
		case <-done:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Proxy forwards connections accepted on its address to one target
// endpoint, as traffic from region From to region To.
type Proxy struct {
	n        *Network
	From, To string
	target   string
	lis      net.Listener
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Proxy starts a proxy on listen (":0" ports pick a free port) that
// forwards to target as traffic from region from to region to.
func (n *Network) Proxy(from, to, listen, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy %s→%s listen %s: %w", from, to, listen, err)
	}
	return n.ProxyOn(from, to, lis, target)
}

// ProxyOn is Proxy on a listener the caller already bound (a port held
// since it was picked); the proxy owns lis from now on, error or not.
func (n *Network) ProxyOn(from, to string, lis net.Listener, target string) (*Proxy, error) {
	p := &Proxy{n: n, From: from, To: to, target: target, lis: lis, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		lis.Close()
		return nil, errors.New("chaos: network closed")
	}
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Target is the endpoint the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		select {
		case <-p.done:
			return false
		default:
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	defer func() { in.Close(); p.track(in, false) }()
	fwd, back := p.n.link(p.From, p.To), p.n.link(p.To, p.From)
	// A partition keeps the connection from reaching its target.
	if !fwd.waitOpen(p.done) || !back.waitOpen(p.done) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out, true) {
		out.Close()
		return
	}
	defer func() { out.Close(); p.track(out, false) }()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(fwd, in, out) }()
	go func() { defer wg.Done(); p.pipe(back, out, in) }()
	wg.Wait()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through l: each chunk is delivered no earlier
// than its read time plus latency and jitter (and the retransmission delay
// of a dropped chunk), in order, within the link's bandwidth, and not
// while l is cut. At most 256 chunks (8 MiB) wait per direction
// (back-pressure). The end of src reaches dst after the link's slow close.
func (p *Proxy) pipe(l *linkState, src, dst net.Conn) {
	q := make(chan chunk, 256)
	stop := make(chan struct{})
	go func() {
		defer close(q)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				d := time.Duration(l.latency.Load())
				if j := l.jitter.Load(); j > 0 {
					d += time.Duration(rand.Int64N(2*j+1) - j)
				}
				d += dropDelayFor(l.shape().Drop)
				due := time.Now().Add(max(d, 0))
				if due.Before(last) {
					due = last // jitter never reorders a stream
				}
				last = due
				select {
				case q <- chunk{buf[:n], due}:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer close(stop)
	for c := range q {
		if w := time.Until(c.due); w > 0 {
			select {
			case <-time.After(w):
			case <-p.done:
				return
			}
		}
		if !l.waitOpen(p.done) {
			return
		}
		if err := p.write(l, dst, c.data); err != nil {
			src.Close()
			return
		}
	}
	// src ended: pass the half-close on, after the slow close.
	if sc := l.shape().SlowClose; sc > 0 {
		select {
		case <-time.After(sc):
		case <-p.done:
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		dst.Close()
	}
}

// write writes data to dst within l's bandwidth: in pieces of a
// twentieth of a second's worth of bytes, each written once the link's
// bucket has let it through.
func (p *Proxy) write(l *linkState, dst net.Conn, data []byte) error {
	for len(data) > 0 {
		rate := l.shape().Bandwidth
		if rate <= 0 {
			_, err := dst.Write(data)
			return err
		}
		piece := min(len(data), max(int(rate/20), minBandwidthPiece))
		if w := time.Until(l.bw.reserve(piece, rate)); w > 0 {
			select {
			case <-time.After(w):
			case <-p.done:
				return net.ErrClosed
			}
		}
		if _, err := dst.Write(data[:piece]); err != nil {
			return err
		}
		data = data[piece:]
	}
	return nil
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.done)
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.lis.Close()
	})
	p.wg.Wait()
}

// Proxies returns the proxies made so far.
func (n *Network) Proxies() []*Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Proxy(nil), n.proxies...)
}

// Close stops every proxy.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	ps := n.proxies
	n.proxies = nil
	n.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}
