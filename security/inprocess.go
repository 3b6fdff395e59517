package security

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// InProcessListener wraps l, an in-memory listener that only this process
// can dial (a bufconn), so that every connection it accepts is
// authenticated as role without a TLS handshake: nothing crosses a socket,
// so there is nothing to encrypt, and the only dialer is the process
// itself. A server with TLS on (Runtime.ServerOptions) skips the handshake
// for these connections alone; every other listener still requires it.
func InProcessListener(l net.Listener, role string) net.Listener {
	return &inProcessListener{Listener: l, role: role}
}

type inProcessListener struct {
	net.Listener
	role string
}

// Accept implements net.Listener.
func (l *inProcessListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &inProcessConn{Conn: c, role: l.role}, nil
}

// InProcessConn marks c, the dialer's end of an in-memory connection, so
// that a client Runtime's credentials (DialOptions) skip the TLS handshake
// on it; tokens are still sent.
func InProcessConn(c net.Conn) net.Conn { return &inProcessConn{Conn: c} }

// inProcessConn is one end of an in-memory connection; role is set on the
// server's end.
type inProcessConn struct {
	net.Conn
	role string
}

// InProcessInfo is the credentials.AuthInfo of an in-process connection.
// It claims privacy and integrity: the bytes never leave the process.
type InProcessInfo struct {
	credentials.CommonAuthInfo
	// Role is the identity the server's listener gives its dialer ("" on
	// the client's end).
	Role string
}

// AuthType implements credentials.AuthInfo.
func (InProcessInfo) AuthType() string { return MethodInProcess }

func inProcessInfo(role string) InProcessInfo {
	return InProcessInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, Role: role}
}

// serverCreds is TLS for every connection but the in-process ones.
type serverCreds struct {
	credentials.TransportCredentials
}

// ServerHandshake implements credentials.TransportCredentials.
func (s serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if ip, ok := raw.(*inProcessConn); ok {
		if ip.role == "" {
			return nil, nil, errors.New("security: in-process connection without a role")
		}
		return raw, inProcessInfo(ip.role), nil
	}
	return s.TransportCredentials.ServerHandshake(raw)
}

// ClientHandshake implements credentials.TransportCredentials.
func (s serverCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return s.TransportCredentials.ClientHandshake(ctx, authority, raw)
}

// Clone implements credentials.TransportCredentials.
func (s serverCreds) Clone() credentials.TransportCredentials {
	return serverCreds{TransportCredentials: s.TransportCredentials.Clone()}
}
