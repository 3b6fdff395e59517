package security_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
)

func TestTokenRefusals(t *testing.T) {
	secretFile, secret := securitytest.SecretKeyFile(t)
	hs, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: secretFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	rsPub, rsPriv := securitytest.KeyPairFiles(t, "RS256")
	rs, err := security.LoadVerifier(security.TokenKeys{PublicKeyFile: rsPub}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rsPubPEM, _ := os.ReadFile(rsPub)
	other := security.GenerateSecretKey()
	sign := func(key any, alg string, claims jwt.MapClaims) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hour := time.Now().Add(time.Hour).Unix()
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "admin", "exp": hour}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		v      *security.Verifier
		token  string
		reason string
	}{
		{"expired", hs, sign(secret, "HS256", jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Minute).Unix()}), "expired"},
		{"not yet valid", hs, sign(secret, "HS256", jwt.MapClaims{"sub": "a", "nbf": time.Now().Add(time.Hour).Unix()}), "not valid yet"},
		{"wrong signature", hs, sign(other, "HS256", jwt.MapClaims{"sub": "a", "exp": hour}), "bad signature"},
		{"alg none", hs, none, "unexpected signing algorithm"},
		{"alg none against RS256", rs, none, "unexpected signing algorithm"},
		{"HS256 keyed with the RS256 public key", rs, sign(rsPubPEM, "HS256", jwt.MapClaims{"sub": "admin", "exp": hour}), "unexpected signing algorithm"},
		{"RS256 against an HS256 key", hs, sign(rsPriv, "RS256", jwt.MapClaims{"sub": "admin", "exp": hour}), "unexpected signing algorithm"},
		{"no sub", hs, sign(secret, "HS256", jwt.MapClaims{"exp": hour}), "no sub"},
		{"malformed", hs, "not.a.token", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role, err := tc.v.Verify(tc.token)
			if !errors.Is(err, security.ErrTokenInvalid) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Verify = %q, %v; want ErrTokenInvalid saying %q", role, err, tc.reason)
			}
			if strings.Contains(err.Error(), tc.token) {
				t.Fatalf("error echoes the token: %v", err)
			}
		})
	}
}

func TestTokenValid(t *testing.T) {
	secretFile, secret := securitytest.SecretKeyFile(t)
	hs, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: secretFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	tok, err := security.SignToken(secret, "HS256", "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if role, err := hs.Verify(tok); err != nil || role != "alice" {
		t.Fatalf("HS256: %q %v", role, err)
	}
	// A token without exp is valid (Pulsar's tokens may not expire).
	tok, _ = security.SignToken(secret, "HS256", "bob", 0)
	if role, err := hs.Verify(tok); err != nil || role != "bob" {
		t.Fatalf("no exp: %q %v", role, err)
	}
	for _, alg := range []string{"RS256", "ES256"} {
		pub, priv := securitytest.KeyPairFiles(t, alg)
		v, err := security.LoadVerifier(security.TokenKeys{PublicKeyFile: pub}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := security.SignToken(priv, alg, "svc", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if role, err := v.Verify(tok); err != nil || role != "svc" {
			t.Fatalf("%s: %q %v", alg, role, err)
		}
		v.Close()
	}
	// ES384 with a P-256 key is refused (the curve pins the algorithm).
	pub, _ := securitytest.KeyPairFiles(t, "ES256")
	v, _ := security.LoadVerifier(security.TokenKeys{PublicKeyFile: pub}, nil)
	defer v.Close()
	k384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	tok, _ = security.SignToken(k384, "ES384", "x", time.Hour)
	if _, err := v.Verify(tok); !errors.Is(err, security.ErrTokenInvalid) {
		t.Fatalf("ES384 against a P-256 key: %v", err)
	}
}

func TestSecretKeyBase64(t *testing.T) {
	key := security.GenerateSecretKey()
	p := filepath.Join(t.TempDir(), "k")
	securitytest.WriteFile(t, p, []byte(base64.StdEncoding.EncodeToString(key)+"\n"))
	v, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if role, err := v.Verify(securitytest.Token(t, key, "r")); err != nil || role != "r" {
		t.Fatalf("base64 secret: %q %v", role, err)
	}
	securitytest.WriteFile(t, p, []byte("short"))
	if _, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: p}, nil); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("short secret: %v", err)
	}
}

// TestTokenKeyRotation replaces the key file: tokens of the new key verify
// and those of the old one stop verifying, without a restart; an invalid
// file keeps the old key.
func TestTokenKeyRotation(t *testing.T) {
	p, k1 := securitytest.SecretKeyFile(t)
	v, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	t1 := securitytest.Token(t, k1, "one")
	securitytest.WriteFile(t, p, []byte("garbage"))
	k2 := security.GenerateSecretKey()
	t2 := securitytest.Token(t, k2, "two")
	// The invalid file is refused: the old key stays.
	waitFor(t, "invalid key file refused", func() bool { return v.ReloadFailures() > 0 })
	if _, err := v.Verify(t1); err != nil {
		t.Fatalf("old key dropped by an invalid file: %v", err)
	}
	securitytest.WriteFile(t, p, k2)
	waitFor(t, "new key in use", func() bool { _, err := v.Verify(t2); return err == nil })
	if _, err := v.Verify(t1); err == nil {
		t.Fatal("old key still verifies after the rotation")
	}
}

func TestTokenFromFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	securitytest.WriteFile(t, p, []byte("first\n"))
	src := security.TokenFromFile(p)
	if tok, err := src.Token(); err != nil || tok != "first" {
		t.Fatalf("%q %v", tok, err)
	}
	securitytest.WriteFile(t, p, []byte("second"))
	if tok, err := src.Token(); err != nil || tok != "second" {
		t.Fatalf("after rewrite: %q %v", tok, err)
	}
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPublicKeyRotation: a public key file holding the old and the new key
// verifies tokens of both; once the old key leaves, its tokens are refused.
func TestPublicKeyRotation(t *testing.T) {
	oldPub, oldPriv := securitytest.KeyPairFiles(t, "RS256")
	newPub, newPriv := securitytest.KeyPairFiles(t, "ES256")
	oldPEM, _ := os.ReadFile(oldPub)
	newPEM, _ := os.ReadFile(newPub)
	p := filepath.Join(t.TempDir(), "pub.pem")
	securitytest.WriteFile(t, p, oldPEM)
	v, err := security.LoadVerifier(security.TokenKeys{PublicKeyFile: p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	oldTok, _ := security.SignToken(oldPriv, "RS256", "old", time.Hour)
	newTok, _ := security.SignToken(newPriv, "ES256", "new", time.Hour)
	securitytest.WriteFile(t, p, append(append([]byte{}, oldPEM...), newPEM...))
	waitFor(t, "both keys", func() bool { _, err := v.Verify(newTok); return err == nil })
	if _, err := v.Verify(oldTok); err != nil {
		t.Fatalf("old key dropped while still in the file: %v", err)
	}
	// HS256 keyed with either public key is still refused.
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x"}).SignedString(newPEM)
	if _, err := v.Verify(hs); err == nil {
		t.Fatal("HS256 with the public key accepted by a key set")
	}
	securitytest.WriteFile(t, p, newPEM)
	waitFor(t, "old key removed", func() bool { _, err := v.Verify(oldTok); return err != nil })
}
