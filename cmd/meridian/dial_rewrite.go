package main

import (
	"context"
	"fmt"
	"net"

	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/grpc"
)

// dial_rewrite: a process config's map of addresses to dial instead (a
// link proxy of `meridian dev`, see region/dev_link.go). It applies to the
// process's gRPC connections to metadata nodes, bookies and brokers; the
// gRPC authority stays the original address.

// validateDialRewrite checks every key and value is host:port; errors name
// field.
func validateDialRewrite(field string, rw map[string]string) error {
	for from, to := range rw {
		if _, _, err := net.SplitHostPort(from); err != nil {
			return fmt.Errorf("%s key %q must be host:port", field, from)
		}
		if _, _, err := net.SplitHostPort(to); err != nil {
			return fmt.Errorf("%s[%q] = %q must be host:port", field, from, to)
		}
	}
	return nil
}

// rewriteDialer is a gRPC dial option that dials rw[addr] instead of addr
// when rw has it (nil when rw is empty).
func rewriteDialer(rw map[string]string) []grpc.DialOption {
	if len(rw) == 0 {
		return nil
	}
	var d net.Dialer
	return []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if to, ok := rw[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, "tcp", addr)
	})}
}

// withDialRewrite makes a metadata client dial through rw.
func withDialRewrite(rw map[string]string) metadata.ClientOption {
	return func(c *metadata.ClientConfig) {
		c.DialOptions = append(c.DialOptions, rewriteDialer(rw)...)
	}
}
