package security

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTLS marks TLS material that cannot be loaded.
var ErrTLS = errors.New("security: tls")

// TLSFiles names the PEM files of a TLS identity.
type TLSFiles struct {
	// CAFile is the CA bundle (PEM, one or more certificates) that peers'
	// certificates must chain to; during a CA rotation it holds the old
	// and the new CA.
	CAFile string `yaml:"ca_file"`
	// CertFile is this side's certificate chain (PEM, leaf first).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the private key of CertFile (PEM, PKCS#8, PKCS#1 or EC).
	KeyFile string `yaml:"key_file"`
}

// IsZero reports whether no file is named.
func (f TLSFiles) IsZero() bool { return f.CAFile == "" && f.CertFile == "" && f.KeyFile == "" }

// Validate checks that the files named make an identity: a CA bundle, and
// a certificate with its key or neither. prefix names the block in errors
// (e.g. "security.tls").
func (f TLSFiles) Validate(prefix string) error {
	switch {
	case f.CAFile == "":
		return fmt.Errorf("%w: %s.ca_file is required when %s is set", ErrTLS, prefix, prefix)
	case f.CertFile == "" && f.KeyFile != "":
		return fmt.Errorf("%w: %s.key_file is set without %s.cert_file", ErrTLS, prefix, prefix)
	case f.CertFile != "" && f.KeyFile == "":
		return fmt.Errorf("%w: %s.cert_file is set without %s.key_file", ErrTLS, prefix, prefix)
	}
	return nil
}

// tlsMaterial is one consistent generation of TLS material.
type tlsMaterial struct {
	cert *tls.Certificate // nil: no certificate (a client with a CA only)
	pool *x509.CertPool
	// notAfter is the leaf's expiry (zero without a certificate).
	notAfter time.Time
}

// TLS holds a TLS identity loaded from files and reloads it when they
// change. Its configs read the current material at every handshake, so a
// rotation applies to new connections without a restart or a redial.
type TLS struct {
	files TLSFiles
	log   *slog.Logger
	cur   atomic.Pointer[tlsMaterial]
	stats reloadStats
	// mu serializes reloads (readers use cur).
	mu    sync.Mutex
	set   fileSet
	watch *Watcher
	// fixed, when set, is a config given by the caller (ClientRuntimeTLS),
	// used as is instead of files.
	fixed *tls.Config
}

// LoadTLS loads f (see TLSFiles.Validate: a CA bundle is required, the
// certificate is optional for a client) and watches its files. Close stops
// watching.
func LoadTLS(f TLSFiles, log *slog.Logger) (*TLS, error) {
	return loadTLS(f, 0, log)
}

func loadTLS(f TLSFiles, poll time.Duration, log *slog.Logger) (*TLS, error) {
	if err := f.Validate("tls"); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	t := &TLS{files: f, log: log.With("component", "tls"), set: fileSet{paths: []string{f.CAFile, f.CertFile, f.KeyFile}}}
	if err := t.reload(); err != nil {
		return nil, err
	}
	w, err := WatchFiles(t.set.paths, poll, log, func() {
		if err := t.reload(); err != nil && !errors.Is(err, errUnchanged) {
			t.stats.failed()
			t.log.Error("TLS material not reloaded; the previous stays in use", "ca_file", f.CAFile, "cert_file", f.CertFile, "err", err)
		}
	})
	if err != nil {
		return nil, err
	}
	t.watch = w
	return t, nil
}

// reload reads the files and swaps in the material when it changed and is
// valid.
func (t *TLS) reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	files, sum, err := t.set.read()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTLS, err)
	}
	if t.cur.Load() != nil && sum == t.set.last {
		return errUnchanged
	}
	m, err := parseTLS(t.files, files[0], files[1], files[2])
	if err != nil {
		return err
	}
	t.cur.Store(m)
	t.set.last = sum
	t.stats.ok()
	t.log.Info("TLS material loaded", "ca_file", t.files.CAFile, "cert_file", t.files.CertFile, "not_after", m.notAfter)
	return nil
}

func parseTLS(f TLSFiles, caPEM, certPEM, keyPEM []byte) (*tlsMaterial, error) {
	m := &tlsMaterial{pool: x509.NewCertPool()}
	n := 0
	for rest := caPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: ca_file %s: %v", ErrTLS, f.CAFile, err)
		}
		m.pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: ca_file %s holds no PEM certificate", ErrTLS, f.CAFile)
	}
	if f.CertFile != "" {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: cert_file %s / key_file %s: %v", ErrTLS, f.CertFile, f.KeyFile, err)
		}
		if c.Leaf == nil {
			if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return nil, fmt.Errorf("%w: cert_file %s: %v", ErrTLS, f.CertFile, err)
			}
		}
		m.cert = &c
		m.notAfter = c.Leaf.NotAfter
	}
	return m, nil
}

// Close stops watching the files. The configs keep the last material.
func (t *TLS) Close() error {
	if t == nil || t.watch == nil {
		return nil
	}
	return t.watch.Close()
}

// HasCertificate reports whether a certificate is loaded (a server needs
// one; a client may present none).
func (t *TLS) HasCertificate() bool {
	return t.cur.Load().cert != nil || (t.fixed != nil && (len(t.fixed.Certificates) > 0 || t.fixed.GetClientCertificate != nil))
}

// NotAfter returns the current certificate's expiry (zero without one).
func (t *TLS) NotAfter() time.Time { return t.cur.Load().notAfter }

// Pool returns the current CA pool. Do not modify it.
func (t *TLS) Pool() *x509.CertPool { return t.cur.Load().pool }

// ServerConfig returns a server config that takes the current certificate
// and CA pool at every handshake. Client certificates are verified when
// given but not required: users may come with a token only, components
// present certificates.
func (t *TLS) ServerConfig() *tls.Config {
	return t.serverConfig(tls.VerifyClientCertIfGiven)
}

// MutualServerConfig is ServerConfig requiring a verified client
// certificate (component-only links: the Raft transport).
func (t *TLS) MutualServerConfig() *tls.Config {
	return t.serverConfig(tls.RequireAndVerifyClientCert)
}

func (t *TLS) serverConfig(auth tls.ClientAuthType) *tls.Config {
	if t.fixed != nil {
		return t.fixed.Clone()
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := t.cur.Load()
			if m.cert == nil {
				return nil, fmt.Errorf("%w: no server certificate configured (cert_file)", ErrTLS)
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   auth,
				NextProtos:   []string{"h2", "http/1.1"},
			}, nil
		},
	}
}

// ClientConfig returns a client config that presents the current
// certificate (if any) and verifies the server against the current CA
// pool at every handshake, so a CA rotation applies without a redial.
// serverName is the name (DNS name or IP address) the server's certificate
// must carry; "" takes the name the TLS stack sends (SNI), which is empty
// for an IP address, so pass the host when dialing an IP.
func (t *TLS) ClientConfig(serverName string) *tls.Config {
	if t.fixed != nil {
		c := t.fixed.Clone()
		if c.ServerName == "" {
			c.ServerName = serverName
		}
		return c
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// The standard verification would use a pool fixed at config time;
		// VerifyConnection below verifies against the current one.
		InsecureSkipVerify:   true, //nolint:gosec // verified in VerifyConnection
		GetClientCertificate: t.getClientCertificate,
		VerifyConnection: func(cs tls.ConnectionState) error {
			name := serverName
			if name == "" {
				name = cs.ServerName
			}
			return t.verifyServer(cs, name)
		},
	}
}

// handshakeClientConfig is the config of one client handshake to host:
// standard verification with the pool current now.
func (t *TLS) handshakeClientConfig(serverName string) *tls.Config {
	m := t.cur.Load()
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		ServerName:           serverName,
		RootCAs:              m.pool,
		GetClientCertificate: t.getClientCertificate,
	}
}

func (t *TLS) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := t.cur.Load().cert; c != nil {
		return c, nil
	}
	return &tls.Certificate{}, nil
}

func (t *TLS) verifyServer(cs tls.ConnectionState, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: server presented no certificate", ErrTLS)
	}
	opts := x509.VerifyOptions{Roots: t.cur.Load().pool, Intermediates: x509.NewCertPool(), DNSName: name}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("%w: server certificate: %v", ErrTLS, err)
	}
	return nil
}

// hostOf returns the host of a host:port (or the whole string).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
