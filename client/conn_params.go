package client

import (
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
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
