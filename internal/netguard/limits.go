package netguard

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Limits. They are generous on purpose: tests run every
// server and client on 127.0.0.1, where all peers share one IP.
const (
	// DefaultMaxConnectionsPerIP is the default MaxConnectionsPerIP.
	DefaultMaxConnectionsPerIP = 1024
	// DefaultMaxHeaderListBytes is the default MaxHeaderListBytes: a
	// bearer token and Meridian's own metadata need a few KiB; gRPC's own
	// default is 16 MiB per stream.
	DefaultMaxHeaderListBytes = 32 << 10
	// DefaultMaxConnectionIdle is the default MaxConnectionIdle.
	DefaultMaxConnectionIdle = 30 * time.Minute
	// DefaultHTTPReadTimeout is the default HTTPReadTimeout: admin bodies
	// are at most 1 MiB.
	DefaultHTTPReadTimeout = 30 * time.Second
	// DefaultHTTPWriteTimeout is the default HTTPWriteTimeout: above the
	// broker's operation_timeout (30s), so an admin call that waits on the
	// metadata store still answers.
	DefaultHTTPWriteTimeout = 2 * time.Minute
	// DefaultHTTPIdleTimeout is the default HTTPIdleTimeout.
	DefaultHTTPIdleTimeout = 2 * time.Minute
	// DefaultHTTPMaxHeaderBytes is the default HTTPMaxHeaderBytes (Go's
	// own is 1 MiB).
	DefaultHTTPMaxHeaderBytes = 64 << 10
	// httpReadHeaderTimeout caps reading a request's headers (below
	// HTTPReadTimeout when that is shorter).
	httpReadHeaderTimeout = 10 * time.Second
)

// Keepalive defaults of the servers whose configs have no keepalive
// fields (bookie, metadata; the broker has its own keepalive_* fields).
const (
	// DefaultKeepaliveTime: a connection silent this long is pinged.
	DefaultKeepaliveTime = 30 * time.Second
	// DefaultKeepaliveTimeout: an unanswered ping closes the connection.
	DefaultKeepaliveTimeout = 10 * time.Second
	// DefaultKeepaliveMinTime: a client pinging more often than this is
	// sent GOAWAY "too_many_pings". gRPC clients cannot ping more often
	// than every 10s, and Meridian's clients of the bookie and metadata
	// do not ping at all.
	DefaultKeepaliveMinTime = 5 * time.Second
)

// ErrInvalidLimits is wrapped by Limits.Validate's errors.
var ErrInvalidLimits = errors.New("invalid limits")

// Limits are the per-peer limits of a server's gRPC and HTTP listeners.
// A component config embeds it inline, so the YAML names below are the
// component's own fields. Start from DefaultLimits: only
// MaxConnectionsPerIP takes 0 (unlimited).
type Limits struct {
	// MaxConnectionsPerIP caps the TCP connections one remote IP holds open
	// on each listener (gRPC and HTTP counted apart); the next one is
	// closed on accept and counted in
	// meridian_server_connections_refused_total. 0 = unlimited. Default
	// 1024: every process of a test or `meridian dev` shares 127.0.0.1.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// MaxStreamsPerConnection caps the concurrent gRPC streams (every call
	// is one) of one connection; a client beyond it waits for a stream to
	// end. Default set per server (broker 10000, bookie and metadata 4096).
	MaxStreamsPerConnection uint32 `yaml:"max_streams_per_connection"`
	// MaxHeaderListBytes caps the header block of one gRPC call, in bytes
	// (default 32 KiB).
	MaxHeaderListBytes uint32 `yaml:"max_header_list_bytes"`
	// MaxConnectionIdle closes (GOAWAY) a gRPC connection that has had no
	// open stream this long; the client reconnects on its next call
	// (default 30m).
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
	// HTTPReadTimeout bounds reading one HTTP request, headers and body
	// (default 30s): a body trickled slower is cut off.
	HTTPReadTimeout time.Duration `yaml:"http_read_timeout"`
	// HTTPWriteTimeout bounds handling a request and writing its answer
	// (default 2m). A handler that legitimately runs longer (the broker's
	// ScrubBookie) lifts it for itself.
	HTTPWriteTimeout time.Duration `yaml:"http_write_timeout"`
	// HTTPIdleTimeout closes a keep-alive HTTP connection idle this long
	// between requests (default 2m).
	HTTPIdleTimeout time.Duration `yaml:"http_idle_timeout"`
	// HTTPMaxHeaderBytes caps an HTTP request's header block, in bytes
	// (default 64 KiB).
	HTTPMaxHeaderBytes int `yaml:"http_max_header_bytes"`
}

// DefaultLimits returns the defaults with streams as
// MaxStreamsPerConnection.
func DefaultLimits(streams uint32) Limits {
	return Limits{
		MaxConnectionsPerIP:     DefaultMaxConnectionsPerIP,
		MaxStreamsPerConnection: streams,
		MaxHeaderListBytes:      DefaultMaxHeaderListBytes,
		MaxConnectionIdle:       DefaultMaxConnectionIdle,
		HTTPReadTimeout:         DefaultHTTPReadTimeout,
		HTTPWriteTimeout:        DefaultHTTPWriteTimeout,
		HTTPIdleTimeout:         DefaultHTTPIdleTimeout,
		HTTPMaxHeaderBytes:      DefaultHTTPMaxHeaderBytes,
	}
}

// Validate names the first field out of range (by its YAML name) and its
// bounds.
func (l Limits) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidLimits, fmt.Sprintf(format, a...))
	}
	switch {
	case l.MaxConnectionsPerIP < 0 || l.MaxConnectionsPerIP > 1<<20:
		return bad("max_connections_per_ip %d must be in [0 (unlimited), %d]", l.MaxConnectionsPerIP, 1<<20)
	case l.MaxStreamsPerConnection < 1 || l.MaxStreamsPerConnection > 1<<20:
		return bad("max_streams_per_connection %d must be in [1, %d]", l.MaxStreamsPerConnection, 1<<20)
	case l.MaxHeaderListBytes < 4<<10 || l.MaxHeaderListBytes > 16<<20:
		return bad("max_header_list_bytes %d must be in [4 KiB, 16 MiB]", l.MaxHeaderListBytes)
	case l.MaxConnectionIdle < time.Second:
		return bad("max_connection_idle %v must be >= 1s", l.MaxConnectionIdle)
	case l.HTTPReadTimeout < 10*time.Millisecond:
		return bad("http_read_timeout %v must be >= 10ms", l.HTTPReadTimeout)
	case l.HTTPWriteTimeout < 10*time.Millisecond:
		return bad("http_write_timeout %v must be >= 10ms", l.HTTPWriteTimeout)
	case l.HTTPIdleTimeout < 10*time.Millisecond:
		return bad("http_idle_timeout %v must be >= 10ms", l.HTTPIdleTimeout)
	case l.HTTPMaxHeaderBytes < 4<<10 || l.HTTPMaxHeaderBytes > 16<<20:
		return bad("http_max_header_bytes %d must be in [4 KiB, 16 MiB]", l.HTTPMaxHeaderBytes)
	}
	return nil
}
