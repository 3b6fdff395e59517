package bookie

import (
	"context"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"google.golang.org/grpc"
)

// WithExpectedIdentity returns dial options that stamp every request sent
// on the connection with the bookie ID and instance ID that identity
// returns at send time (expected_bookie_id, expected_instance_id), so that
// a bookie answers only if it is that instance. Requests are modified in
// place. For a fixed identity use FixedIdentity.
func WithExpectedIdentity(identity func() (bookieID, instanceID string)) []grpc.DialOption {
	stamp := func(m any) {
		if r, ok := m.(bookiev1.ExpectedIdentity); ok {
			r.SetExpectedIdentity(identity())
		}
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			stamp(req)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &stampingStream{ClientStream: cs, stamp: stamp}, nil
		}),
	}
}

// FixedIdentity returns an identity func for WithExpectedIdentity.
func FixedIdentity(bookieID, instanceID string) func() (string, string) {
	return func() (string, string) { return bookieID, instanceID }
}

type stampingStream struct {
	grpc.ClientStream
	stamp func(any)
}

func (s *stampingStream) SendMsg(m any) error {
	s.stamp(m)
	return s.ClientStream.SendMsg(m)
}
