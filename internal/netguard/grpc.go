package netguard

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive is a gRPC server's keepalive pinging and enforcement.
type Keepalive struct {
	// Time: a connection silent this long is pinged; Timeout: an
	// unanswered ping closes it.
	Time, Timeout time.Duration
	// MinTime: a client pinging more often, with or without open streams,
	// is sent GOAWAY "too_many_pings". Keep it below every client's
	// keepalive time.
	MinTime time.Duration
}

// DefaultKeepalive is the keepalive of the bookie and metadata servers.
func DefaultKeepalive() Keepalive {
	return Keepalive{Time: DefaultKeepaliveTime, Timeout: DefaultKeepaliveTimeout, MinTime: DefaultKeepaliveMinTime}
}

// GRPCServerOptions are the per-connection limits of a gRPC server:
// maxRecvMsg (the largest message accepted, in bytes; a larger one fails
// with ResourceExhausted), l's stream, header and idle limits, and ka.
// Flow control bounds the unread bytes of a connection by its window:
// gRPC's dynamic window stops growing at 16 MiB; servers that fix a
// window add grpc.InitialWindowSize themselves.
func (l Limits) GRPCServerOptions(maxRecvMsg int, ka Keepalive) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvMsg),
		grpc.MaxConcurrentStreams(l.MaxStreamsPerConnection),
		grpc.MaxHeaderListSize(l.MaxHeaderListBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.MaxConnectionIdle,
			Time:              ka.Time,
			Timeout:           ka.Timeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ka.MinTime, PermitWithoutStream: true}),
	}
}
