package client

import (
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// connectParams makes gRPC's own reconnect backoff follow the client's
// options, so a restarted broker is found again quickly.
func connectParams(o Options) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff: grpcbackoff.Config{
			BaseDelay:  o.InitialBackoff,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   o.MaxBackoff,
		},
		MinConnectTimeout: min(o.ConnectTimeout, 5*time.Second),
	}
}

// keepaliveParams are the client's keepalive pings, or ok=false when
// disabled. Pings also run without an open stream, so a lookup or admin
// call does not wait on a connection that died while idle. The broker's
// enforcement policy (broker.Config.KeepaliveMinTime) allows this rate.
func keepaliveParams(o Options) (keepalive.ClientParameters, bool) {
	if o.KeepaliveTime < 0 {
		return keepalive.ClientParameters{}, false
	}
	return keepalive.ClientParameters{
		Time:                o.KeepaliveTime,
		Timeout:             o.KeepaliveTimeout,
		PermitWithoutStream: true,
	}, true
}
