package bookie

import (
	"context"
	"fmt"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Response header keys naming the bookie that answered: every bookie RPC
// response (success or error) carries them, and clients dialed with
// WithExpectedIdentity check them. With the request fields checked by the
// bookie, this guards both ends: an answer from any other process — an
// older bookie that does not check the request, a stray server on a
// reused address — is never taken for the bookie's.
const (
	HeaderBookieID   = "meridian-bookie-id"
	HeaderInstanceID = "meridian-bookie-instance"
)

// identityServerOptions makes every response carry the bookie's identity
// headers.
func identityServerOptions(s *Server) []grpc.ServerOption {
	md := func() metadata.MD {
		return metadata.Pairs(HeaderBookieID, s.cfg.ID, HeaderInstanceID, s.instanceID)
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			_ = grpc.SetHeader(ctx, md())
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			_ = ss.SetHeader(md())
			return h(srv, ss)
		}),
	}
}

// WithExpectedIdentity returns dial options that stamp every request sent
// on the connection with the bookie ID and instance ID that identity
// returns at send time (expected_bookie_id, expected_instance_id), so that
// a bookie answers only if it is that instance, and that reject every
// answer whose identity headers (HeaderBookieID, HeaderInstanceID) name
// another bookie or instance, or are missing, with FAILED_PRECONDITION
// "wrong bookie" (transport failures, which carry no answer, pass
// through). Requests are modified in place.
func WithExpectedIdentity(identity func() (bookieID, instanceID string)) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			id, inst := identity()
			if r, ok := req.(bookiev1.ExpectedIdentity); ok {
				r.SetExpectedIdentity(id, inst)
			}
			var hdr metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...)
			if answered(err) {
				if werr := checkAnswerIdentity(hdr, id, inst); werr != nil {
					return werr
				}
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &identityStream{ClientStream: cs, identity: identity}, nil
		}),
	}
}

// answered reports whether err (nil included) is an answer of the server
// rather than a transport failure or a local cancellation.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Unknown, codes.ResourceExhausted:
		// Unavailable is both "bookie read-only" (an answer) and a
		// transport failure; ResourceExhausted both a bookie's refusal
		// and gRPC's own (a message over the server's limit, which has
		// no identity headers). Neither can make a caller take data or
		// absence for the bookie's, so they are not checked.
		return false
	}
	return true
}

func checkAnswerIdentity(hdr metadata.MD, id, inst string) error {
	gotID, gotInst := first(hdr.Get(HeaderBookieID)), first(hdr.Get(HeaderInstanceID))
	if gotID == id && gotInst == inst {
		return nil
	}
	return status.Error(codes.FailedPrecondition, fmt.Sprintf("%s: expected bookie %s instance %s, the answer came from bookie %q instance %q",
		ReasonWrongBookie, id, inst, gotID, gotInst))
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// FixedIdentity returns an identity func for WithExpectedIdentity.
func FixedIdentity(bookieID, instanceID string) func() (string, string) {
	return func() (string, string) { return bookieID, instanceID }
}

// identityStream stamps every request and checks the response headers
// before the first message is delivered.
type identityStream struct {
	grpc.ClientStream
	identity func() (string, string)
	checked  bool
}

func (s *identityStream) SendMsg(m any) error {
	if r, ok := m.(bookiev1.ExpectedIdentity); ok {
		r.SetExpectedIdentity(s.identity())
	}
	return s.ClientStream.SendMsg(m)
}

func (s *identityStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if s.checked {
		return err
	}
	if err != nil && !answered(err) {
		return err
	}
	// The headers are here once a message or a status arrived.
	hdr, herr := s.ClientStream.Header()
	if herr != nil {
		return err
	}
	s.checked = true
	id, inst := s.identity()
	if werr := checkAnswerIdentity(hdr, id, inst); werr != nil {
		return werr
	}
	return err
}
