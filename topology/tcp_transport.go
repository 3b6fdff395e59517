package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// TCPTransport is a memberlist transport that carries both gossip packets
// and streams over TCP, and dials DialRewrite[addr] instead of addr when
// there is such an entry. It exists so that the WAN pool can go through a
// TCP-only link proxy (`meridian dev`, the chaos tests), which memberlist's
// default UDP+TCP transport cannot.
//
// Wire format. Every connection starts with a preamble: the magic bytes
// "MWT1", one byte of kind (packets or stream), a uint16 length and the
// sender's advertised gossip address. A stream connection is then handed
// to memberlist as it is. A packet connection carries frames: a uint32
// length and one packet. The receiver reports each packet as coming from
// the advertised address of the preamble, not from the TCP peer (which may
// be a proxy), so that replies go through the rewrite too.
//
// Packets keep UDP's contract: best effort. Each destination has one
// outbound packet connection fed by a bounded queue (packetQueue packets);
// a full queue drops the packet, a failed write drops it and the
// connection, which is dialed again for the next packet. memberlist
// retries by design (probes, indirect probes, gossip rounds).
//
// All members of one gossip pool must use the same transport: this one
// does not interoperate with memberlist's NetTransport.
type TCPTransport struct {
	cfg      TCPTransportConfig
	log      *slog.Logger
	lis      net.Listener
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	wg       sync.WaitGroup

	// mu guards the fields below.
	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{} // open connections, both ways
	senders  map[string]*packetSender
	selfAddr string // advertised address, set by FinalAdvertiseAddr
}

// TCPTransportConfig configures a TCPTransport.
type TCPTransportConfig struct {
	// BindAddr is the TCP listen address, host:port (port 0: a free port).
	BindAddr string
	// DialRewrite maps a member's gossip address to the address dialed
	// instead (a link proxy). Unmapped addresses are dialed as they are.
	DialRewrite map[string]string
	// Logger receives the transport's logs (nil discards).
	Logger *slog.Logger
}

const (
	tcpTransportMagic = "MWT1"

	tcpKindPacket byte = 1
	tcpKindStream byte = 2

	// packetQueue bounds the packets queued towards one destination.
	packetQueue = 256
	// maxPacket bounds one packet frame. memberlist keeps packets under its
	// UDPBufferSize (1400 bytes by default); 1 MiB leaves room for a larger
	// setting and still stops a corrupt length.
	maxPacket = 1 << 20
	// packetWriteTimeout bounds one packet write: a stalled link drops
	// packets rather than blocking gossip.
	packetWriteTimeout = 5 * time.Second
	// packetIdle closes an outbound packet connection unused this long.
	packetIdle = 2 * time.Minute
	// preambleTimeout bounds the wait for a new connection's preamble.
	preambleTimeout = 10 * time.Second
)

var (
	_ memberlist.NodeAwareTransport = (*TCPTransport)(nil)
	// errTransportClosed is returned by calls after Shutdown.
	errTransportClosed = errors.New("topology: transport closed")
)

// NewTCPTransport listens on cfg.BindAddr.
func NewTCPTransport(cfg TCPTransportConfig) (*TCPTransport, error) {
	if _, _, err := splitHostPort(cfg.BindAddr); err != nil {
		return nil, fmt.Errorf("%w: BindAddr %q: %v", ErrInvalidArgument, cfg.BindAddr, err)
	}
	for from, to := range cfg.DialRewrite {
		if _, _, err := splitHostPort(from); err != nil {
			return nil, fmt.Errorf("%w: DialRewrite key %q: %v", ErrInvalidArgument, from, err)
		}
		if _, _, err := splitHostPort(to); err != nil {
			return nil, fmt.Errorf("%w: DialRewrite[%q] = %q: %v", ErrInvalidArgument, from, to, err)
		}
	}
	lis, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("topology: gossip listen %s: %w", cfg.BindAddr, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rw := make(map[string]string, len(cfg.DialRewrite))
	for k, v := range cfg.DialRewrite {
		rw[k] = v
	}
	cfg.DialRewrite = rw
	t := &TCPTransport{
		cfg: cfg, log: log.With("component", "gossip-tcp"), lis: lis,
		packetCh: make(chan *memberlist.Packet, 1024),
		streamCh: make(chan net.Conn, 64),
		done:     make(chan struct{}),
		conns:    map[net.Conn]struct{}{},
		senders:  map[string]*packetSender{},
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr is the bound listen address.
func (t *TCPTransport) Addr() string { return t.lis.Addr().String() }

// FinalAdvertiseAddr implements memberlist.Transport: the configured
// address when given, else the bound one.
func (t *TCPTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	bound := t.lis.Addr().(*net.TCPAddr)
	var adIP net.IP
	if ip != "" {
		adIP = net.ParseIP(ip)
		if adIP == nil {
			return nil, 0, fmt.Errorf("topology: advertise address %q is not an IP", ip)
		}
	} else {
		adIP = bound.IP
		if adIP.IsUnspecified() {
			return nil, 0, fmt.Errorf("topology: bound to %s: set an advertise address", bound)
		}
	}
	if port == 0 {
		port = bound.Port
	}
	if v4 := adIP.To4(); v4 != nil {
		adIP = v4
	}
	t.mu.Lock()
	t.selfAddr = net.JoinHostPort(adIP.String(), strconv.Itoa(port))
	t.mu.Unlock()
	return adIP, port, nil
}

func (t *TCPTransport) self() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.selfAddr == "" {
		return t.lis.Addr().String()
	}
	return t.selfAddr
}

// dialAddr is the address dialed for a member's address.
func (t *TCPTransport) dialAddr(addr string) string {
	if to, ok := t.cfg.DialRewrite[addr]; ok {
		return to
	}
	return addr
}

// PacketCh implements memberlist.Transport.
func (t *TCPTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh implements memberlist.Transport.
func (t *TCPTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// WriteTo implements memberlist.Transport: it queues the packet for addr
// and returns; the packet is dropped if addr's queue is full.
func (t *TCPTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return now, errTransportClosed
	}
	s := t.senders[addr]
	if s == nil {
		s = &packetSender{t: t, addr: addr, q: make(chan []byte, packetQueue)}
		t.senders[addr] = s
		t.wg.Add(1)
		go s.run()
	}
	select {
	case s.q <- append([]byte(nil), b...):
	default:
		t.log.Debug("packet queue full: packet dropped", "to", addr)
	}
	t.mu.Unlock()
	return now, nil
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *TCPTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// DialTimeout implements memberlist.Transport: a stream connection to addr
// (through its rewrite), preamble written.
func (t *TCPTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.dial(addr, tcpKindStream, timeout)
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c, t: t}, nil
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *TCPTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *TCPTransport) dial(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	to := t.dialAddr(addr)
	c, err := net.DialTimeout("tcp", to, timeout)
	if err != nil {
		return nil, fmt.Errorf("topology: dial %s (via %s): %w", addr, to, err)
	}
	if !t.track(c, true) {
		c.Close()
		return nil, errTransportClosed
	}
	self := t.self()
	pre := make([]byte, 0, len(tcpTransportMagic)+3+len(self))
	pre = append(pre, tcpTransportMagic...)
	pre = append(pre, kind)
	pre = binary.BigEndian.AppendUint16(pre, uint16(len(self)))
	pre = append(pre, self...)
	_ = c.SetWriteDeadline(time.Now().Add(max(timeout, time.Second)))
	if _, err := c.Write(pre); err != nil {
		c.Close()
		t.track(c, false)
		return nil, fmt.Errorf("topology: dial %s: write preamble: %w", addr, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

func (t *TCPTransport) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !add {
		delete(t.conns, c)
		return true
	}
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

// Shutdown implements memberlist.Transport: it stops listening, closes
// every connection and waits for the transport's goroutines. Safe to call
// more than once.
func (t *TCPTransport) Shutdown() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	t.lis.Close()
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return nil
}

func (t *TCPTransport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.lis.Accept()
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			t.log.Warn("gossip accept failed", "err", err)
			return
		}
		if !t.track(c, true) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go t.serve(c)
	}
}

// serve reads an inbound connection's preamble, then hands a stream to
// memberlist or reads packets until the connection ends.
func (t *TCPTransport) serve(c net.Conn) {
	defer t.wg.Done()
	handedOver := false
	defer func() {
		if !handedOver {
			c.Close()
			t.track(c, false)
		}
	}()
	var h [len(tcpTransportMagic) + 3]byte
	_ = c.SetReadDeadline(time.Now().Add(preambleTimeout))
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return
	}
	if string(h[:len(tcpTransportMagic)]) != tcpTransportMagic {
		t.log.Warn("gossip connection with a bad preamble", "remote", c.RemoteAddr().String())
		return
	}
	kind := h[len(tcpTransportMagic)]
	src := make([]byte, binary.BigEndian.Uint16(h[len(tcpTransportMagic)+1:]))
	if _, err := io.ReadFull(c, src); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	from, err := net.ResolveTCPAddr("tcp", string(src))
	if err != nil {
		t.log.Warn("gossip connection with a bad source address", "remote", c.RemoteAddr().String(), "source", string(src))
		return
	}
	switch kind {
	case tcpKindStream:
		select {
		case t.streamCh <- &trackedConn{Conn: c, t: t}:
			handedOver = true
		case <-t.done:
		}
	case tcpKindPacket:
		var lenb [4]byte
		for {
			if _, err := io.ReadFull(c, lenb[:]); err != nil {
				return
			}
			n := binary.BigEndian.Uint32(lenb[:])
			if n > maxPacket {
				t.log.Warn("gossip packet too large: connection closed", "from", from.String(), "bytes", n, "limit", maxPacket)
				return
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			select {
			case t.packetCh <- &memberlist.Packet{Buf: buf, From: from, Timestamp: time.Now()}:
			case <-t.done:
				return
			}
		}
	default:
		t.log.Warn("gossip connection of unknown kind", "remote", c.RemoteAddr().String(), "kind", kind)
	}
}

// trackedConn forgets the connection in the transport when closed.
type trackedConn struct {
	net.Conn
	t    *TCPTransport
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.t.track(c.Conn, false) })
	return err
}

// packetSender owns the outbound packet connection to one address.
type packetSender struct {
	t    *TCPTransport
	addr string
	q    chan []byte
}

func (s *packetSender) run() {
	defer s.t.wg.Done()
	var c net.Conn
	closeConn := func() {
		if c != nil {
			c.Close()
			s.t.track(c, false)
			c = nil
		}
	}
	defer closeConn()
	idle := time.NewTimer(packetIdle)
	defer idle.Stop()
	var retryAt time.Time
	for {
		var b []byte
		select {
		case <-s.t.done:
			return
		case <-idle.C:
			// Retire: later packets start a new sender. Removing it under
			// the lock means no packet is queued to it afterwards.
			s.t.mu.Lock()
			if len(s.q) > 0 {
				s.t.mu.Unlock()
				idle.Reset(packetIdle)
				continue
			}
			delete(s.t.senders, s.addr)
			s.t.mu.Unlock()
			return
		case b = <-s.q:
		}
		idle.Reset(packetIdle)
		if c == nil {
			if time.Now().Before(retryAt) {
				continue // the last dial failed just now: drop
			}
			nc, err := s.t.dial(s.addr, tcpKindPacket, packetWriteTimeout)
			if err != nil {
				s.t.log.Debug("gossip packet dial failed: packet dropped", "to", s.addr, "err", err)
				retryAt = time.Now().Add(100 * time.Millisecond)
				continue
			}
			c = nc
		}
		frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
		frame = append(frame, b...)
		_ = c.SetWriteDeadline(time.Now().Add(packetWriteTimeout))
		if _, err := c.Write(frame); err != nil {
			s.t.log.Debug("gossip packet write failed: packet dropped", "to", s.addr, "err", err)
			closeConn()
		}
	}
}
