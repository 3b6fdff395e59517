package metadata

import "google.golang.org/grpc"

// newGRPCServer builds the node's gRPC server.
func newGRPCServer(n *Node) *grpc.Server {
	return grpc.NewServer()
}
