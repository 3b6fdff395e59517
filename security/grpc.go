package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Authorizer decides whether an authenticated (or, with auth off,
// possibly anonymous) identity may call a method. It is called on every
// RPC and stream with the full method name ("/pkg.Service/Method"); it
// may be called concurrently. An error with a gRPC status is returned as
// is; any other error becomes PermissionDenied.
type Authorizer interface {
	Authorize(ctx context.Context, fullMethod string, id Identity) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, fullMethod string, id Identity) error

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, fullMethod string, id Identity) error {
	return f(ctx, fullMethod, id)
}

// AllowAuthenticated lets through every call that reaches it: the Runtime
// has already refused anonymous callers when auth is enabled, so any
// authenticated identity may call anything. The placeholder until the
// rule table of phase 2.
var AllowAuthenticated Authorizer = AuthorizerFunc(func(context.Context, string, Identity) error { return nil })

// Runtime is a component's security at run time: its TLS material and
// token verifier (both reloaded from their files) and the token it
// presents. A nil *Runtime is security off. Safe for concurrent use.
type Runtime struct {
	cfg      Config
	log      *slog.Logger
	tls      *TLS
	verifier *Verifier
	token    TokenSource
}

// NewRuntime validates c and loads its material. With security off it
// returns a Runtime whose options are plaintext. Close stops the file
// watchers.
func NewRuntime(c Config, log *slog.Logger) (*Runtime, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rt := &Runtime{cfg: c, log: log}
	if c.Enabled() {
		t, err := loadTLS(c.TLS, c.ReloadPollInterval, log)
		if err != nil {
			return nil, err
		}
		rt.tls = t
	}
	if c.Auth.Enabled {
		v, err := loadVerifier(c.Auth.Keys, c.ReloadPollInterval, log)
		if err != nil {
			rt.Close()
			return nil, err
		}
		rt.verifier = v
	}
	if c.TokenFile != "" {
		rt.token = TokenFromFile(c.TokenFile)
		if _, err := rt.token.Token(); err != nil {
			rt.Close()
			return nil, fmt.Errorf("%w: security.token_file: %v", ErrConfig, err)
		}
	}
	return rt, nil
}

// ClientRuntime is a Runtime for a dialer only (the Go client, the CLI):
// TLS material may lack a certificate, and tok (nil: none) is presented on
// every call. tlsFiles zero means plaintext; a token then is refused.
func ClientRuntime(tlsFiles TLSFiles, tok TokenSource, log *slog.Logger) (*Runtime, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rt := &Runtime{log: log, token: tok}
	if !tlsFiles.IsZero() {
		t, err := LoadTLS(tlsFiles, log)
		if err != nil {
			return nil, err
		}
		rt.tls = t
	} else if tok != nil {
		return nil, fmt.Errorf("%w: a token requires TLS (a CA file): it would cross the network in clear", ErrConfig)
	}
	return rt, nil
}

// ClientRuntimeTLS is ClientRuntime with a ready tls.Config (used as is,
// not reloaded) instead of files.
func ClientRuntimeTLS(cfg *tls.Config, tok TokenSource) (*Runtime, error) {
	if cfg == nil && tok != nil {
		return nil, fmt.Errorf("%w: a token requires TLS: it would cross the network in clear", ErrConfig)
	}
	rt := &Runtime{log: slog.New(slog.NewTextHandler(io.Discard, nil)), token: tok}
	if cfg != nil {
		rt.tls = &TLS{fixed: cfg}
		rt.tls.cur.Store(&tlsMaterial{})
	}
	return rt, nil
}

// Close stops watching the files.
func (rt *Runtime) Close() error {
	if rt == nil {
		return nil
	}
	err := rt.tls.Close()
	if e := rt.verifier.Close(); err == nil {
		err = e
	}
	return err
}

// Config returns the block the Runtime was built from.
func (rt *Runtime) Config() Config {
	if rt == nil {
		return Config{}
	}
	return rt.cfg
}

// TLS returns the TLS material (nil without TLS).
func (rt *Runtime) TLS() *TLS {
	if rt == nil {
		return nil
	}
	return rt.tls
}

// Verifier returns the token verifier (nil with auth off).
func (rt *Runtime) Verifier() *Verifier {
	if rt == nil {
		return nil
	}
	return rt.verifier
}

// AuthEnabled reports whether anonymous calls are refused.
func (rt *Runtime) AuthEnabled() bool { return rt != nil && rt.cfg.Auth.Enabled }

// off reports whether there is nothing to do on a server.
func (rt *Runtime) off() bool { return rt == nil || (rt.tls == nil && rt.verifier == nil) }

// ServerOptions returns the gRPC server options of a listener: TLS
// credentials, and interceptors that authenticate every call (a bearer
// token in the "authorization" metadata, else the verified client
// certificate's CN, else anonymous), put the Identity in the context, refuse
// anonymous calls with Unauthenticated when auth is on, and then ask auth
// (nil: AllowAuthenticated). With security off: no options (plaintext, no
// interceptor).
func (rt *Runtime) ServerOptions(auth Authorizer) []grpc.ServerOption {
	if rt.off() {
		return nil
	}
	if auth == nil {
		auth = AllowAuthenticated
	}
	var opts []grpc.ServerOption
	if rt.tls != nil {
		// No read buffer of gRPC's own over TLS: crypto/tls already buffers
		// a whole record, and a second 32 KiB buffer on top of it costs a
		// copy of every byte and, measured, 7–11% of publish throughput on a
		// standalone (docs/BENCHMARKS.md, "TLS and tokens").
		opts = append(opts, grpc.Creds(serverCreds{credentials.NewTLS(rt.tls.ServerConfig())}), grpc.ReadBufferSize(0))
	}
	opts = append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := rt.authorize(ctx, info.FullMethod, auth)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := rt.authorize(ss.Context(), info.FullMethod, auth)
			if err != nil {
				return err
			}
			return h(srv, &identityStream{ServerStream: ss, ctx: ctx})
		}))
	return opts
}

// identityStream carries the authenticated context into a stream handler.
type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the context with the caller's Identity.
func (s *identityStream) Context() context.Context { return s.ctx }

func (rt *Runtime) authorize(ctx context.Context, method string, auth Authorizer) (context.Context, error) {
	id, err := rt.authenticateGRPC(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if id.Anonymous() && rt.AuthEnabled() {
		return nil, status.Error(codes.Unauthenticated, "security: authentication required: present a token or a client certificate")
	}
	ctx = WithIdentity(ctx, id)
	if err := auth.Authorize(ctx, method, id); err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return ctx, nil
}

// authenticateGRPC finds the caller's identity; an error means credentials
// were presented and are invalid.
func (rt *Runtime) authenticateGRPC(ctx context.Context) (Identity, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && rt.verifier != nil {
		if vs := md.Get("authorization"); len(vs) > 0 {
			return rt.authenticateBearer(vs[0])
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		switch ai := p.AuthInfo.(type) {
		case credentials.TLSInfo:
			return certIdentity(ai.State.VerifiedChains), nil
		case InProcessInfo:
			return Identity{Role: ai.Role, Method: MethodInProcess}, nil
		}
	}
	return Identity{}, nil
}

// authenticateBearer verifies an "authorization" value. Callers skip it
// with auth off: a token is then ignored (the certificate, if any, or
// anonymous), as Pulsar does without an authentication provider.
func (rt *Runtime) authenticateBearer(v string) (Identity, error) {
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok {
		return Identity{}, errors.New("security: authorization is not \"Bearer <token>\"")
	}
	role, err := rt.verifier.Verify(strings.TrimSpace(tok))
	if err != nil {
		return Identity{}, err
	}
	return Identity{Role: role, Method: MethodToken}, nil
}

// certIdentity is the identity of a verified client certificate chain.
func certIdentity(chains [][]*x509.Certificate) Identity {
	if len(chains) == 0 || len(chains[0]) == 0 || chains[0][0].Subject.CommonName == "" {
		return Identity{}
	}
	return Identity{Role: chains[0][0].Subject.CommonName, Method: MethodTLS}
}

// DialOptions returns the options of a gRPC dial: TLS credentials with
// this component's certificate, verifying the server against the current
// CA pool and the name serverName ("" : the host of the dialed address),
// and the token, if any, on every call. With security off: plaintext.
func (rt *Runtime) DialOptions(serverName string) []grpc.DialOption {
	if rt == nil || rt.tls == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// No gRPC read buffer over TLS, as in ServerOptions.
	opts := []grpc.DialOption{grpc.WithTransportCredentials(&clientCreds{t: rt.tls, serverName: serverName}), grpc.WithReadBufferSize(0)}
	if rt.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{src: rt.token}))
	}
	return opts
}

// clientCreds builds each client handshake's config from the material
// current at that moment, so a new CA or certificate applies to the next
// connection.
type clientCreds struct {
	t          *TLS
	serverName string
}

var _ credentials.TransportCredentials = (*clientCreds)(nil)

func (c *clientCreds) config(authority string) *tls.Config {
	if c.t.fixed != nil {
		cfg := c.t.fixed.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = c.name(authority)
		}
		return cfg
	}
	return c.t.handshakeClientConfig(c.name(authority))
}

func (c *clientCreds) name(authority string) string {
	if c.serverName != "" {
		return c.serverName
	}
	return hostOf(authority)
}

// ClientHandshake implements credentials.TransportCredentials.
func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := raw.(*inProcessConn); ok {
		return raw, inProcessInfo(""), nil
	}
	return credentials.NewTLS(c.config(authority)).ClientHandshake(ctx, authority, raw)
}

// ServerHandshake implements credentials.TransportCredentials; client
// credentials do not serve.
func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("security: client credentials cannot serve")
}

// Info implements credentials.TransportCredentials.
func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

// Clone implements credentials.TransportCredentials.
func (c *clientCreds) Clone() credentials.TransportCredentials { cc := *c; return &cc }

// OverrideServerName implements credentials.TransportCredentials.
func (c *clientCreds) OverrideServerName(name string) error { c.serverName = name; return nil }

// tokenCreds puts the token on every call; never over plaintext.
type tokenCreds struct{ src TokenSource }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.src.Token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (tokenCreds) RequireTransportSecurity() bool { return true }

// ServerNameOf returns the name a server at addr (host:port) must be
// certified for: its host. Dialers that rewrite addresses (dev link
// proxies) pass the original address's name to DialOptions.
func ServerNameOf(addr string) string { return hostOf(addr) }
