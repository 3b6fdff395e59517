package security

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// HTTPTLS returns the TLS config of an HTTP listener (nil without TLS:
// serve plaintext). Wrap the listener with tls.NewListener.
func (rt *Runtime) HTTPTLS() *tls.Config {
	if rt == nil || rt.tls == nil {
		return nil
	}
	return rt.tls.ServerConfig()
}

// HTTPListener wraps lis with TLS when configured (lis itself otherwise).
func (rt *Runtime) HTTPListener(lis net.Listener) net.Listener {
	if c := rt.HTTPTLS(); c != nil {
		return tls.NewListener(lis, c)
	}
	return lis
}

// HTTPHandler wraps h so that every request carries its Identity (a
// verified `Authorization: Bearer` token, else the verified client
// certificate's CN, else anonymous) in its context. With auth on, an
// anonymous or badly authenticated request is refused with 401, except
// on the paths in public (exact match: health probes such as /healthz
// and /readyz that cannot present credentials). With security off, h is
// returned unchanged.
func (rt *Runtime) HTTPHandler(h http.Handler, public ...string) http.Handler {
	if rt.off() {
		return h
	}
	open := map[string]bool{}
	for _, p := range public {
		open[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := rt.authenticateHTTP(r)
		if (err != nil || id.Anonymous()) && rt.AuthEnabled() && !open[r.URL.Path] {
			msg := "authentication required: present a bearer token or a client certificate"
			if err != nil {
				msg = err.Error()
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="meridian"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			b, _ := json.Marshal(map[string]string{"code": "ERROR_CODE_UNAUTHENTICATED", "message": msg})
			_, _ = w.Write(b)
			return
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

func (rt *Runtime) authenticateHTTP(r *http.Request) (Identity, error) {
	if v := r.Header.Get("Authorization"); v != "" && rt.verifier != nil {
		return rt.authenticateBearer(v)
	}
	if r.TLS != nil {
		return certIdentity(r.TLS.VerifiedChains), nil
	}
	return Identity{}, nil
}

// HTTPClient returns an HTTP client for this Runtime's identity: TLS with
// its certificate against the current CA pool (per connection, with the
// dialed host as the server name) and its token as `Authorization:
// Bearer` on every request. Without TLS it is a plain client. timeout 0
// means none.
func (rt *Runtime) HTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	var rtp http.RoundTripper = tr
	if rt != nil && rt.tls != nil {
		t := rt.tls
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			c := tls.Client(raw, t.ClientConfig(hostOf(addr)))
			if err := c.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			return c, nil
		}
		if rt.token != nil {
			rtp = bearerTransport{src: rt.token, next: tr}
		}
	}
	return &http.Client{Transport: rtp, Timeout: timeout}
}

// bearerTransport adds the token to every request.
type bearerTransport struct {
	src  TokenSource
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.src.Token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(r)
}

// Scheme returns "https" with TLS, "http" without.
func (rt *Runtime) Scheme() string {
	if rt != nil && rt.tls != nil {
		return "https"
	}
	return "http"
}
