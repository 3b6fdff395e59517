package security

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Fuzz targets for what clients send and operators load: bearer tokens,
// public key files, secret key files and private signing keys (issue 22
// item 6). Seeds live in testdata/fuzz/<target>/, so plain go test runs
// them.

// fuzzSecret and fuzzEdSeed make the HS256 and EdDSA keys of
// FuzzVerifyToken the same on every run: their tokens (fixed claims,
// deterministic signatures) are committed as seeds and verify. The ES256
// and RS256 keys are generated afresh; their tokens are f.Add seeds only.
var (
	fuzzSecret = sha256.Sum256([]byte("meridian FuzzVerifyToken HS256 secret"))
	fuzzEdSeed = sha256.Sum256([]byte("meridian FuzzVerifyToken Ed25519 seed"))
)

// fuzzVerifier is one configured key and the tokens validly signed with it.
type fuzzVerifier struct {
	name  string
	v     *Verifier
	valid map[string]bool
}

func newFuzzVerifier(name string, k *verifyKey) *fuzzVerifier {
	v := &Verifier{}
	v.cur.Store(k)
	return &fuzzVerifier{name: name, v: v, valid: map[string]bool{}}
}

// fuzzClaims are fixed, so that HS256 and EdDSA tokens are byte-identical
// across runs: issued 2026-01-01, no expiry.
func fuzzClaims(sub string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "iat": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}
}

func fuzzSign(f *testing.F, alg string, key any, claims jwt.Claims) string {
	m := jwt.GetSigningMethod(alg)
	if alg == "none" {
		key = jwt.UnsafeAllowNoneSignatureType
	}
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		f.Fatal(err)
	}
	return s
}

func pemPublic(f *testing.F, pub any) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		f.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// FuzzVerifyToken verifies arbitrary strings as bearer tokens against an
// HS256 secret, an EdDSA, an ES256 and an RS256 public key, and a
// rotation file holding two public keys. Properties: no panic; a token is
// accepted only if it is byte-identical to one validly signed with that
// verifier's key (and then its sub is what was signed); a refusal wraps
// ErrTokenInvalid and does not echo the token; verifying allocates in
// proportion to the token.
func FuzzVerifyToken(f *testing.F) {
	edPriv := ed25519.NewKeyFromSeed(fuzzEdSeed[:])
	esPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	rsPriv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	otherSecret := sha256.Sum256([]byte("not the configured secret"))
	mk := func(name string, parse func([]byte) (*verifyKey, error), b []byte) *fuzzVerifier {
		k, err := parse(b)
		if err != nil {
			f.Fatalf("%s key: %v", name, err)
		}
		return newFuzzVerifier(name, k)
	}
	edPEM, esPEM, rsPEM := pemPublic(f, edPriv.Public()), pemPublic(f, &esPriv.PublicKey), pemPublic(f, &rsPriv.PublicKey)
	hs := mk("HS256", parseSecretKey, fuzzSecret[:])
	ed := mk("EdDSA", parsePublicKey, edPEM)
	es := mk("ES256", parsePublicKey, esPEM)
	rs := mk("RS256", parsePublicKey, rsPEM)
	rot := mk("rotation", parsePublicKey, append(append([]byte{}, esPEM...), edPEM...))
	vs := []*fuzzVerifier{hs, ed, es, rs, rot}

	valid := func(tok string, to ...*fuzzVerifier) {
		for _, fv := range to {
			fv.valid[tok] = true
		}
		f.Add(tok)
	}
	for _, sub := range []string{"admin", "broker.a", "bookie.eu-west", "x"} {
		valid(fuzzSign(f, "HS256", fuzzSecret[:], fuzzClaims(sub)), hs)
		valid(fuzzSign(f, "HS512", fuzzSecret[:], fuzzClaims(sub)), hs)
		valid(fuzzSign(f, "EdDSA", edPriv, fuzzClaims(sub)), ed, rot)
		valid(fuzzSign(f, "ES256", esPriv, fuzzClaims(sub)), es, rot)
		valid(fuzzSign(f, "RS256", rsPriv, fuzzClaims(sub)), rs)
	}
	hour := time.Now().Add(time.Hour).Unix()
	// Signed with the secret but refused: no sub, or outside exp/nbf.
	refused := map[string]bool{}
	for _, c := range []jwt.MapClaims{
		{"iat": 1},
		{"sub": "a", "exp": 1},
		{"sub": "a", "nbf": hour},
		{"sub": 7},
		{"sub": "a", "exp": "soon"},
	} {
		tok := fuzzSign(f, "HS256", fuzzSecret[:], c)
		refused[tok] = true
		f.Add(tok)
	}
	// Signed with the secret, iat an hour ahead: accepted (Verify checks
	// exp and nbf, not iat).
	valid(fuzzSign(f, "HS256", fuzzSecret[:], jwt.MapClaims{"sub": "a", "iat": hour}), hs)
	for _, tok := range []string{
		fuzzSign(f, "HS256", otherSecret[:], fuzzClaims("admin")), // another secret
		fuzzSign(f, "none", nil, fuzzClaims("admin")),             // alg none
		fuzzSign(f, "HS256", edPEM, fuzzClaims("admin")),          // HMAC keyed with a public key
		fuzzSign(f, "HS256", esPEM, fuzzClaims("admin")),          // idem
		fuzzSign(f, "HS256", rsPEM, fuzzClaims("admin")),          // idem
		fuzzSign(f, "ES384", mustP384(f), fuzzClaims("admin")),    // a curve no key has
		"", ".", "..", "a.b.c", "a.b.c.d", "eyJhbGciOiJIUzI1NiJ9..", "eyJ9.eyJ9.AAAA", "Bearer x",
		"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + strings.Repeat("A", 4096) + ".sig",
	} {
		f.Add(tok)
	}
	// Strip the signature of a valid token, or swap a valid signature onto
	// other claims.
	good := fuzzSign(f, "HS256", fuzzSecret[:], fuzzClaims("admin"))
	other := fuzzSign(f, "HS256", fuzzSecret[:], fuzzClaims("broker.a"))
	f.Add(good[:strings.LastIndexByte(good, '.')+1])
	f.Add(other[:strings.LastIndexByte(other, '.')] + good[strings.LastIndexByte(good, '.'):])

	f.Fuzz(func(t *testing.T, tok string) {
		for _, fv := range vs {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			role, err := fv.v.Verify(tok)
			runtime.ReadMemStats(&after)
			if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(64*len(tok)+256<<10); got > bound {
				t.Fatalf("%s: verifying a %d-byte token allocated %d, bound %d", fv.name, len(tok), got, bound)
			}
			if err != nil {
				if !errors.Is(err, ErrTokenInvalid) {
					t.Fatalf("%s: refusal does not wrap ErrTokenInvalid: %v", fv.name, err)
				}
				if len(tok) >= 16 && strings.Contains(err.Error(), tok) {
					t.Fatalf("%s: refusal echoes the token: %v", fv.name, err)
				}
				continue
			}
			if refused[tok] {
				t.Fatalf("%s accepted an expired, not yet valid or sub-less token: %q", fv.name, tok)
			}
			if !fv.valid[tok] {
				t.Fatalf("%s accepted a token it never signed (role %q): %q", fv.name, role, tok)
			}
			if role == "" {
				t.Fatalf("%s: accepted with an empty role", fv.name)
			}
			if kind, region, ok := ParseComponent(role); ok && ComponentRole(kind, region) != role {
				t.Fatalf("ParseComponent(%q) = %q, %q: does not rebuild the role", role, kind, region)
			}
		}
	})
}

func mustP384(f *testing.F) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	return k
}

// FuzzParsePublicKey parses arbitrary bytes as a public_key_file.
// Properties: no panic; an accepted file yields at least one key and
// algorithms drawn only from the families its keys allow (never HS*, never
// none); parsing allocates in proportion to the file.
func FuzzParsePublicKey(f *testing.F) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	es, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	edPEM, esPEM := pemPublic(f, edPub), pemPublic(f, &es.PublicKey)
	f.Add(edPEM)
	f.Add(esPEM)
	f.Add(pemPublic(f, &rs.PublicKey))
	f.Add(pemPublic(f, &small.PublicKey))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rs.PublicKey)}))
	f.Add(append(append([]byte{}, esPEM...), edPEM...))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x03, 0x02, 0x01, 0x01}}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")}))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"))
	f.Add([]byte{})
	allowed := map[string]bool{"RS256": true, "RS384": true, "RS512": true, "ES256": true, "ES384": true, "ES512": true, "EdDSA": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		k, err := parsePublicKey(data)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(64*len(data)+256<<10); got > bound {
			t.Fatalf("parsing %d bytes allocated %d, bound %d", len(data), got, bound)
		}
		if err != nil {
			return
		}
		if k.key == nil || len(k.methods) == 0 {
			t.Fatalf("accepted a key file with no key or no algorithm: %+v", k)
		}
		for _, m := range k.methods {
			if !allowed[m] {
				t.Fatalf("public key allows algorithm %q", m)
			}
		}
	})
}

// FuzzParseSecretKey parses arbitrary bytes as a secret_key_file.
// Properties: no panic; an accepted secret is at least MinSecretKeyBytes
// and allows only HS*.
func FuzzParseSecretKey(f *testing.F) {
	f.Add(fuzzSecret[:])
	f.Add([]byte("c2hvcnQ=\n"))
	f.Add([]byte("  MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=  \n"))
	f.Add(bytes.Repeat([]byte{'A'}, 31))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseSecretKey(data)
		if err != nil {
			return
		}
		s, ok := k.key.([]byte)
		if !ok || len(s) < MinSecretKeyBytes {
			t.Fatalf("accepted a secret of %T %d bytes", k.key, len(s))
		}
		for _, m := range k.methods {
			if !strings.HasPrefix(m, "HS") {
				t.Fatalf("secret allows %q", m)
			}
		}
	})
}

// FuzzParseSigningKey parses arbitrary bytes as a private key PEM (what
// `meridian tokens create` signs with). Properties: no panic; refusals
// wrap ErrTokenKeys; an accepted key signs a token with the algorithm
// returned, and that token verifies against the key's public half.
func FuzzParseSigningKey(f *testing.F) {
	for _, alg := range []string{"ES256", "EdDSA"} {
		priv, _, err := GenerateKeyPair(alg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(priv)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(ec)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte{0x30, 0x00}}))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("junk")}))
	f.Add([]byte("not pem"))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, alg, err := ParseSigningKey(data)
		if err != nil {
			if !errors.Is(err, ErrTokenKeys) {
				t.Fatalf("refusal does not wrap ErrTokenKeys: %v", err)
			}
			return
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			t.Fatalf("accepted key of type %T has no public half", key)
		}
		tok, err := SignToken(key, alg, "admin", time.Hour)
		if err != nil {
			t.Fatalf("accepted key does not sign with %s: %v", alg, err)
		}
		pub, err := x509.MarshalPKIXPublicKey(signer.Public())
		if err != nil {
			t.Fatalf("public half: %v", err)
		}
		vk, err := parsePublicKey(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
		if err != nil {
			t.Fatalf("public half of an accepted key is refused: %v", err)
		}
		v := &Verifier{}
		v.cur.Store(vk)
		if role, err := v.Verify(tok); err != nil || role != "admin" {
			t.Fatalf("token signed with an accepted key: role %q, %v", role, err)
		}
	})
}
