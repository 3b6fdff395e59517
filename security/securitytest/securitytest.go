// Package securitytest generates certificate authorities, certificates
// and token keys into temporary directories for tests: ECDSA P-256, server
// certificates for 127.0.0.1, ::1 and localhost, client and component
// certificates with a given common name.
package securitytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/security"
)

var serial atomic.Int64

// CA is a test certificate authority.
type CA struct {
	t    testing.TB
	dir  string
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM.
	PEM []byte
}

// NewCA creates a CA named name valid for a day, in a fresh temp dir.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &CA{t: t, dir: t.TempDir(), Cert: c, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is a certificate and key issued by a CA.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for cn, usable as server and client (SANs
// 127.0.0.1, ::1, localhost and cn), valid for a day.
func (ca *CA) Issue(cn string) Leaf {
	ca.t.Helper()
	return ca.IssueValid(cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// IssueValid is Issue with the validity period given.
func (ca *CA) IssueValid(cn string, notBefore, notAfter time.Time) Leaf {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost", cn},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// Files writes the CA bundle (ca, plus extra CAs) and a new certificate
// for cn into a new directory and returns their paths.
func (ca *CA) Files(cn string, extra ...*CA) security.TLSFiles {
	ca.t.Helper()
	dir, err := os.MkdirTemp(ca.dir, "tls-*")
	if err != nil {
		ca.t.Fatal(err)
	}
	f := security.TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	WriteBundle(ca.t, f.CAFile, append([]*CA{ca}, extra...)...)
	l := ca.Issue(cn)
	WriteLeaf(ca.t, f, l)
	return f
}

// CAOnly writes the CA bundle alone (a client authenticating by token) and
// returns its files.
func (ca *CA) CAOnly() security.TLSFiles {
	ca.t.Helper()
	dir, err := os.MkdirTemp(ca.dir, "tls-*")
	if err != nil {
		ca.t.Fatal(err)
	}
	f := security.TLSFiles{CAFile: filepath.Join(dir, "ca.pem")}
	WriteBundle(ca.t, f.CAFile, ca)
	return f
}

// WriteBundle atomically replaces path with the PEM of the CAs.
func WriteBundle(t testing.TB, path string, cas ...*CA) {
	t.Helper()
	var b []byte
	for _, c := range cas {
		b = append(b, c.PEM...)
	}
	WriteFile(t, path, b)
}

// WriteLeaf atomically replaces f's certificate and key with l (the key
// first: the reload that sees the new certificate sees its key too once
// both are written; a reload between them fails and keeps the old pair).
func WriteLeaf(t testing.TB, f security.TLSFiles, l Leaf) {
	t.Helper()
	WriteFile(t, f.KeyFile, l.KeyPEM)
	WriteFile(t, f.CertFile, l.CertPEM)
}

// WriteFile atomically replaces path with b (mode 0600), as a rotation
// tool would: write a temp file beside it, then rename.
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// SecretKeyFile writes a new HS256 secret (raw bytes) into a temp dir and
// returns its path and the secret.
func SecretKeyFile(t testing.TB) (string, []byte) {
	t.Helper()
	key := security.GenerateSecretKey()
	p := filepath.Join(t.TempDir(), "secret.key")
	WriteFile(t, p, key)
	return p, key
}

// KeyPairFiles writes a new key pair for alg (RS256, ES256) into a temp
// dir and returns the public key's path and the parsed private key.
func KeyPairFiles(t testing.TB, alg string) (pubPath string, priv any) {
	t.Helper()
	privPEM, pubPEM, err := security.GenerateKeyPair(alg)
	if err != nil {
		t.Fatal(err)
	}
	pubPath = filepath.Join(t.TempDir(), "public.pem")
	WriteFile(t, pubPath, pubPEM)
	priv, _, err = security.ParseSigningKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pubPath, priv
}

// Token signs an HS256 token for subject with key, valid for an hour.
func Token(t testing.TB, key []byte, subject string) string {
	t.Helper()
	s, err := security.SignToken(key, "HS256", subject, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Env is a ready security setup for a test: a CA, an HS256 key file and
// helpers to build each component's security block.
type Env struct {
	t  testing.TB
	CA *CA
	// SecretFile is the HS256 key file; Secret its key.
	SecretFile string
	Secret     []byte
}

// NewEnv creates a CA and a token key.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	p, k := SecretKeyFile(t)
	return &Env{t: t, CA: NewCA(t, "meridian-test-ca"), SecretFile: p, Secret: k}
}

// Component returns a security block with TLS (a new certificate for
// role) and token auth enabled.
func (e *Env) Component(role string) security.Config {
	e.t.Helper()
	return security.Config{TLS: e.CA.Files(role),
		Auth: security.AuthConfig{Enabled: true, Keys: security.TokenKeys{SecretKeyFile: e.SecretFile}}}
}

// Token signs a token for role.
func (e *Env) Token(role string) string { e.t.Helper(); return Token(e.t, e.Secret, role) }
