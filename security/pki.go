package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A generated PKI for one-command secured clusters (`meridian standalone
// --secure`, `meridian dev`): a CA, a certificate per component role, an
// HS256 secret key and an admin token, all in one directory, created once
// and reused on every start. Real deployments bring their own (cert-manager,
// their CA): see docs/SECURITY.md.

// Provisioned names the files of a provisioned directory.
type Provisioned struct {
	// Dir is the directory (mode 0700).
	Dir string
	// CA is the CA bundle clients trust (ca.pem); CAKey its key.
	CA, CAKey string
	// SecretKey is the HS256 key brokers verify tokens with.
	SecretKey string
	// AdminToken holds a token for role AdminRole (a superuser).
	AdminToken string
}

// AdminRole is the superuser role of a provisioned cluster's admin token.
const AdminRole = "admin"

// provisionValidity is how long provisioned certificates are valid.
const provisionValidity = 10 * 365 * 24 * time.Hour

// Files returns the TLS files of role's certificate in the directory.
func (p Provisioned) Files(role string) TLSFiles {
	return TLSFiles{CAFile: p.CA, CertFile: filepath.Join(p.Dir, role+".pem"), KeyFile: filepath.Join(p.Dir, role+".key")}
}

// Component returns the security block of a component with role: its
// certificate, token authentication with the provisioned key, AdminRole
// as superuser.
func (p Provisioned) Component(role string) Config {
	return Config{TLS: p.Files(role), Auth: AuthConfig{Enabled: true, Keys: TokenKeys{SecretKeyFile: p.SecretKey}},
		Superusers: []string{AdminRole}}
}

// Provision creates, in dir, what a secured cluster of these component
// roles needs: a CA (kept: it exists → reused), a certificate per role
// not there yet (SANs: hosts, 127.0.0.1, ::1, localhost and the role), a
// secret key and an admin token. Files are 0600, the directory 0700.
func Provision(dir string, roles []string, hosts []string) (Provisioned, error) {
	p := Provisioned{Dir: dir, CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca.key"),
		SecretKey: filepath.Join(dir, "secret.key"), AdminToken: filepath.Join(dir, "admin.token")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("security: provision %s: %w", dir, err)
	}
	caCert, caKey, err := loadOrCreateCA(p.CA, p.CAKey)
	if err != nil {
		return p, err
	}
	for _, role := range roles {
		f := p.Files(role)
		if exists(f.CertFile) && exists(f.KeyFile) {
			continue
		}
		certPEM, keyPEM, err := issue(caCert, caKey, role, hosts)
		if err != nil {
			return p, err
		}
		if err := writePrivate(f.KeyFile, keyPEM); err != nil {
			return p, err
		}
		if err := writePrivate(f.CertFile, certPEM); err != nil {
			return p, err
		}
	}
	if !exists(p.SecretKey) {
		key := []byte(base64.StdEncoding.EncodeToString(GenerateSecretKey()) + "\n")
		if err := writePrivate(p.SecretKey, key); err != nil {
			return p, err
		}
	}
	if !exists(p.AdminToken) {
		b, err := os.ReadFile(p.SecretKey)
		if err != nil {
			return p, err
		}
		tok, err := SignToken(DecodeSecretKey(b), "HS256", AdminRole, 0)
		if err != nil {
			return p, err
		}
		if err := writePrivate(p.AdminToken, []byte(tok+"\n")); err != nil {
			return p, err
		}
	}
	return p, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writePrivate writes b to path atomically, mode 0600.
func writePrivate(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("security: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("security: %w", err)
	}
	return nil
}

func loadOrCreateCA(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, cerr := os.ReadFile(certPath)
	kb, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		cblk, _ := pem.Decode(cb)
		kblk, _ := pem.Decode(kb)
		if cblk == nil || kblk == nil {
			return nil, nil, fmt.Errorf("security: %s or %s is not PEM", certPath, keyPath)
		}
		c, err := x509.ParseCertificate(cblk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("security: %s: %w", certPath, err)
		}
		k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("security: %s: %w", keyPath, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, nil, fmt.Errorf("security: %s: not an ECDSA key", keyPath)
		}
		return c, ek, nil
	}
	if !errors.Is(cerr, fs.ErrNotExist) && cerr != nil {
		return nil, nil, fmt.Errorf("security: %w", cerr)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "Meridian generated CA", Organization: []string{"Meridian"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(provisionValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePrivate(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})); err != nil {
		return nil, nil, err
	}
	if err := writePrivate(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func randSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n.Add(n, big.NewInt(1))
}

// issue signs a server and client certificate for cn.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, hosts []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Meridian"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(provisionValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost", cn},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}
