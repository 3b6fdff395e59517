package security

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// TestProvision: a provisioned directory holds a CA, a certificate per
// role that chains to it, a secret key and an admin token that verifies
// as AdminRole; files are 0600 and the directory 0700; a second call
// reuses everything (the CA above all).
func TestProvision(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "security")
	p, err := Provision(dir, []string{"broker.standalone", "bookie.standalone"}, []string{"example.internal"})
	if err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(p.CA)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBefore) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, role := range []string{"broker.standalone", "bookie.standalone"} {
		f := p.Files(role)
		kp, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if leaf.Subject.CommonName != role {
			t.Fatalf("%s: CN %q", role, leaf.Subject.CommonName)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.internal", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
	}
	v, err := LoadVerifier(TokenKeys{SecretKeyFile: p.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tok, _ := os.ReadFile(p.AdminToken)
	if role, err := v.Verify(string(bytes.TrimSpace(tok))); err != nil || role != AdminRole {
		t.Fatalf("admin token: role %q, %v", role, err)
	}
	err = filepathWalk(dir, func(path string, info os.FileInfo) {
		if info.IsDir() && info.Mode().Perm() != 0o700 || !info.IsDir() && info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", path, info.Mode().Perm())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(dir, []string{"broker.standalone", "metadata.standalone"}, nil); err != nil {
		t.Fatal(err)
	}
	caAfter, _ := os.ReadFile(p.CA)
	if !bytes.Equal(caBefore, caAfter) {
		t.Fatal("a second Provision made a new CA")
	}
	if _, err := os.Stat(p.Files("metadata.standalone").CertFile); err != nil {
		t.Fatalf("new role's certificate: %v", err)
	}
	if c := p.Component("broker.standalone"); c.Validate() != nil || !c.Auth.Enabled || c.Superusers[0] != AdminRole {
		t.Fatalf("component config %+v: %v", c, c.Validate())
	}
}

func filepathWalk(dir string, f func(string, os.FileInfo)) error {
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		f(p, info)
		return nil
	})
}
