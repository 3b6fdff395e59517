package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// dialBrokers opens one gRPC connection to a --url that is one broker
// address or a comma-separated list of them, like produce and consume
// accept. gRPC's pick_first uses the first address that connects, so a
// dead broker early in the list costs one failed connect, and a call is
// never sent twice.
//
// The credential flags (--tls-ca, --token, ...) apply; each address is
// verified against its own host name. (The credentials' file watcher
// lives as long as the command.)
func dialBrokers(url string) (*grpc.ClientConn, error) {
	var addrs []resolver.Address
	for _, a := range strings.Split(url, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("--url %s: address %q: want host:port (%v)", url, a, err)
		}
		addrs = append(addrs, resolver.Address{Addr: a, ServerName: security.ServerNameOf(a)})
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("--url is required (host:port of a broker, or a comma-separated list)")
	}
	sec, err := cliRuntime()
	if err != nil {
		return nil, err
	}
	r := manual.NewBuilderWithScheme("meridian-brokers")
	r.InitialState(resolver.State{Addresses: addrs})
	cc, err := grpc.NewClient(r.Scheme()+":///brokers", append(sec.DialOptions(""), grpc.WithResolvers(r))...)
	if err != nil {
		return nil, fmt.Errorf("--url %s: %w", url, err)
	}
	return cc, nil
}
