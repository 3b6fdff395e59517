package netguard

import (
	"errors"
	"net"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Listener wraps a net.Listener so that each remote IP holds at most Max
// connections at once: Accept closes a connection beyond that and waits
// for the next one. Connections whose remote address is not an IP (an
// in-memory pipe) are not counted. Safe for concurrent use.
type Listener struct {
	net.Listener
	max     int
	refused prometheus.Counter

	// mu guards open.
	mu sync.Mutex
	// open counts the connections each remote IP holds; an IP is absent
	// at zero.
	open map[netip.Addr]int
}

// LimitPerIP wraps lis (see Listener). max <= 0 means unlimited: lis is
// returned as it is. refused (nil = not counted) is incremented for each
// connection closed for its IP.
func LimitPerIP(lis net.Listener, max int, refused prometheus.Counter) net.Listener {
	if max <= 0 {
		return lis
	}
	return &Listener{Listener: lis, max: max, refused: refused, open: map[netip.Addr]int{}}
}

// Accept returns the next connection whose remote IP is under the limit.
// Errors of the wrapped listener are returned unchanged.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, ok := remoteIP(c)
		if !ok {
			return c, nil
		}
		l.mu.Lock()
		n := l.open[ip]
		if n >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			if l.refused != nil {
				l.refused.Inc()
			}
			continue
		}
		l.open[ip] = n + 1
		l.mu.Unlock()
		return &conn{Conn: c, l: l, ip: ip}, nil
	}
}

// Open returns how many connections ip holds now (for tests and debug).
func (l *Listener) Open(ip netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[ip.Unmap()]
}

// IPs returns how many remote IPs hold at least one connection.
func (l *Listener) IPs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[ip]; n > 1 {
		l.open[ip] = n - 1
	} else {
		delete(l.open, ip)
	}
}

// remoteIP is c's remote IP, IPv4-mapped addresses unmapped so that one
// host counts once whichever form its address takes.
func remoteIP(c net.Conn) (netip.Addr, bool) {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	case nil:
		return netip.Addr{}, false
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}, false
		}
		return ap.Addr().Unmap(), true
	}
}

// conn releases its IP's count on the first Close.
type conn struct {
	net.Conn
	l    *Listener
	ip   netip.Addr
	once sync.Once
}

// Close releases the slot before closing, so that a peer that has seen
// the close can connect again at once.
func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c.ip) })
	return c.Conn.Close()
}

// NetConn returns the wrapped connection (as tls.Conn does), for code
// that needs the concrete type.
func (c *conn) NetConn() net.Conn { return c.Conn }

// Metrics counts refused connections of one server.
type Metrics struct {
	server  string
	refused *prometheus.CounterVec
}

// NewMetrics registers meridian_server_connections_refused_total on reg
// (nil = not registered) for the server named server ("broker", "bookie",
// "metadata"). Several servers may share reg: the collector is shared.
func NewMetrics(reg prometheus.Registerer, server string) (*Metrics, error) {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meridian_server_connections_refused_total",
		Help: "Connections closed on accept because a limit was reached (reason per_ip: the remote IP held max_connections_per_ip).",
	}, []string{"server", "listener", "reason"})
	if reg != nil {
		if err := reg.Register(cv); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			cv = existing
		}
	}
	return &Metrics{server: server, refused: cv}, nil
}

// RefusedPerIP is the counter of the listener named listener ("grpc",
// "http") for the per-IP limit. A nil Metrics gives nil (not counted).
func (m *Metrics) RefusedPerIP(listener string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.refused.WithLabelValues(m.server, listener, "per_ip")
}
