package security

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Token errors. Verify wraps one of them; the message says why, never the
// token.
var (
	// ErrTokenInvalid: the token is malformed, badly signed, expired, not
	// yet valid, or of an algorithm the key does not allow.
	ErrTokenInvalid = errors.New("security: invalid token")
	// ErrTokenKeys: the key files cannot be loaded.
	ErrTokenKeys = errors.New("security: token keys")
)

// MinSecretKeyBytes is the shortest HS256 secret accepted (32 bytes, the
// output size of SHA-256: a shorter key weakens the MAC).
const MinSecretKeyBytes = 32

// TokenKeys names the key a Verifier checks tokens with: exactly one of a
// secret (HS256) or a public key (RS256 or ES256).
type TokenKeys struct {
	// SecretKeyFile holds the HS256 secret: raw bytes, or base64 as
	// `meridian tokens create-secret-key --base64` writes (the file is
	// taken as base64 when its whole trimmed content decodes to at least
	// MinSecretKeyBytes bytes).
	SecretKeyFile string `yaml:"secret_key_file"`
	// PublicKeyFile holds PEM public keys (PKIX or PKCS#1 RSA, ECDSA,
	// Ed25519) or certificates: RSA gives RS256/384/512, ECDSA P-256
	// ES256 (P-384 ES384, P-521 ES512), Ed25519 EdDSA. During a rotation
	// it holds the old and the new key; a token verifies against any.
	PublicKeyFile string `yaml:"public_key_file"`
}

// Validate checks that exactly one key file is named; prefix names the
// block in errors (e.g. "security.auth.keys").
func (k TokenKeys) Validate(prefix string) error {
	switch {
	case k.SecretKeyFile == "" && k.PublicKeyFile == "":
		return fmt.Errorf("%w: %s.secret_key_file or %s.public_key_file is required", ErrTokenKeys, prefix, prefix)
	case k.SecretKeyFile != "" && k.PublicKeyFile != "":
		return fmt.Errorf("%w: set only one of %s.secret_key_file and %s.public_key_file", ErrTokenKeys, prefix, prefix)
	}
	return nil
}

// verifyKey is one generation of verification key.
type verifyKey struct {
	key     any
	methods []string
}

// Verifier verifies JWTs with a key loaded from a file, reloaded when the
// file changes. Safe for concurrent use.
type Verifier struct {
	keys  TokenKeys
	log   *slog.Logger
	cur   atomic.Pointer[verifyKey]
	stats reloadStats
	// mu serializes reloads.
	mu    sync.Mutex
	set   fileSet
	watch *Watcher
}

// LoadVerifier loads keys and watches the key file; Close stops watching.
func LoadVerifier(keys TokenKeys, log *slog.Logger) (*Verifier, error) {
	return loadVerifier(keys, 0, log)
}

func loadVerifier(keys TokenKeys, poll time.Duration, log *slog.Logger) (*Verifier, error) {
	if err := keys.Validate("keys"); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	path := keys.SecretKeyFile + keys.PublicKeyFile
	v := &Verifier{keys: keys, log: log.With("component", "token-keys"), set: fileSet{paths: []string{path}}}
	if err := v.reload(); err != nil {
		return nil, err
	}
	w, err := WatchFiles(v.set.paths, poll, log, func() {
		if err := v.reload(); err != nil && !errors.Is(err, errUnchanged) {
			v.stats.failed()
			v.log.Error("token key not reloaded; the previous stays in use", "file", path, "err", err)
		}
	})
	if err != nil {
		return nil, err
	}
	v.watch = w
	return v, nil
}

func (v *Verifier) reload() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	files, sum, err := v.set.read()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTokenKeys, err)
	}
	if v.cur.Load() != nil && sum == v.set.last {
		return errUnchanged
	}
	var k *verifyKey
	if v.keys.SecretKeyFile != "" {
		k, err = parseSecretKey(files[0])
	} else {
		k, err = parsePublicKey(files[0])
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrTokenKeys, v.set.paths[0], err)
	}
	v.cur.Store(k)
	v.set.last = sum
	v.stats.ok()
	v.log.Info("token key loaded", "file", v.set.paths[0], "algorithms", k.methods)
	return nil
}

// DecodeSecretKey returns the secret a secret key file holds (see
// TokenKeys.SecretKeyFile).
func DecodeSecretKey(b []byte) []byte {
	t := bytes.TrimSpace(b)
	if d, err := base64.StdEncoding.DecodeString(string(t)); err == nil && len(d) >= MinSecretKeyBytes {
		return d
	}
	return b
}

func parseSecretKey(b []byte) (*verifyKey, error) {
	s := DecodeSecretKey(b)
	if len(s) < MinSecretKeyBytes {
		return nil, fmt.Errorf("secret key is %d bytes, at least %d required", len(s), MinSecretKeyBytes)
	}
	return &verifyKey{key: s, methods: []string{"HS256", "HS384", "HS512"}}, nil
}

// parsePublicKey parses every PEM public key (or certificate) of a file:
// during a rotation it holds the old and the new key, and a token
// verifies against any of them.
func parsePublicKey(b []byte) (*verifyKey, error) {
	set := jwt.VerificationKeySet{}
	seen := map[string]bool{}
	var methods []string
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		var pub any
		var err error
		switch blk.Type {
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(blk.Bytes); err == nil {
				pub = c.PublicKey
			}
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(blk.Bytes)
		default:
			pub, err = x509.ParsePKIXPublicKey(blk.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("key %d: %v", len(set.Keys)+1, err)
		}
		k, err := publicVerifyKey(pub)
		if err != nil {
			return nil, fmt.Errorf("key %d: %v", len(set.Keys)+1, err)
		}
		set.Keys = append(set.Keys, k.key)
		for _, m := range k.methods {
			if !seen[m] {
				seen[m] = true
				methods = append(methods, m)
			}
		}
	}
	switch len(set.Keys) {
	case 0:
		return nil, errors.New("no PEM public key")
	case 1:
		return &verifyKey{key: set.Keys[0], methods: methods}, nil
	}
	// Each key's Verify refuses a token of another key type, so the union
	// of the methods lets no algorithm through that no key has.
	return &verifyKey{key: set, methods: methods}, nil
}

// publicVerifyKey pins the algorithms to the key's type: a token signed
// with another family (HS256 keyed with the public key's bytes, "none")
// never verifies.
func publicVerifyKey(pub any) (*verifyKey, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits, at least 2048 required", k.N.BitLen())
		}
		return &verifyKey{key: k, methods: []string{"RS256", "RS384", "RS512"}}, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return &verifyKey{key: k, methods: []string{"ES256"}}, nil
		case elliptic.P384():
			return &verifyKey{key: k, methods: []string{"ES384"}}, nil
		case elliptic.P521():
			return &verifyKey{key: k, methods: []string{"ES512"}}, nil
		}
		return nil, fmt.Errorf("unsupported ECDSA curve %s", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return &verifyKey{key: k, methods: []string{"EdDSA"}}, nil
	}
	return nil, fmt.Errorf("unsupported public key type %T", pub)
}

// Close stops watching the key file.
func (v *Verifier) Close() error {
	if v == nil || v.watch == nil {
		return nil
	}
	return v.watch.Close()
}

// Verify checks token's signature with the current key, its exp and nbf
// claims, and returns its sub claim as the role. Errors wrap
// ErrTokenInvalid and say why (expired, bad signature, unexpected
// algorithm) without echoing the token. Segments must be canonical
// base64url: the lenient decoder took a signature whose last character
// had its unused low bits set, so a valid token had other spellings that
// verified too (FuzzVerifyToken).
func (v *Verifier) Verify(token string) (string, error) {
	k := v.cur.Load()
	claims := jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return k.key, nil },
		jwt.WithValidMethods(k.methods), jwt.WithLeeway(5*time.Second), jwt.WithStrictDecoding())
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrTokenInvalid, tokenReason(err))
	}
	if claims.Subject == "" {
		return "", fmt.Errorf("%w: no sub claim", ErrTokenInvalid)
	}
	return claims.Subject, nil
}

// tokenReason names why jwt refused a token; jwt's own messages can
// include parts of the token.
func tokenReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "used before issued (iat)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if strings.Contains(err.Error(), "signing method") {
			return "unexpected signing algorithm"
		}
		return "bad signature"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unexpected signing algorithm"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	}
	return "refused"
}

// SignToken signs a token for subject with key: []byte for HS256/384/512,
// *rsa.PrivateKey for RS*, *ecdsa.PrivateKey for ES*, ed25519.PrivateKey
// for EdDSA. expiry > 0 sets exp that far from now; 0 makes a token that
// does not expire.
func SignToken(key any, alg string, subject string, expiry time.Duration) (string, error) {
	if subject == "" {
		return "", fmt.Errorf("%w: subject is empty", ErrTokenKeys)
	}
	m := jwt.GetSigningMethod(alg)
	if m == nil || alg == "none" {
		return "", fmt.Errorf("%w: unknown signing algorithm %q", ErrTokenKeys, alg)
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{Subject: subject, IssuedAt: jwt.NewNumericDate(now)}
	if expiry > 0 {
		claims.ExpiresAt = jwt.NewNumericDate(now.Add(expiry))
	}
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("%w: sign: %v", ErrTokenKeys, err)
	}
	return s, nil
}

// GenerateSecretKey returns a random 32-byte HS256 secret.
func GenerateSecretKey() []byte {
	b := make([]byte, MinSecretKeyBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

// GenerateKeyPair returns a new private key (PKCS#8 PEM) and its public
// key (PKIX PEM) for alg: RS256 (RSA 2048), ES256 (P-256) or EdDSA.
func GenerateKeyPair(alg string) (privPEM, pubPEM []byte, err error) {
	var priv crypto.Signer
	switch alg {
	case "RS256":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, fmt.Errorf("%w: key pair algorithm %q: use RS256, ES256 or EdDSA", ErrTokenKeys, alg)
	}
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// ParseSigningKey parses a PEM private key (PKCS#8, PKCS#1 or EC) and
// returns it with the algorithm SignToken should use for it (RS256,
// ES256/384/512, EdDSA).
func ParseSigningKey(privPEM []byte) (key any, alg string, err error) {
	blk, _ := pem.Decode(privPEM)
	if blk == nil {
		return nil, "", fmt.Errorf("%w: no PEM block in private key", ErrTokenKeys)
	}
	switch blk.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: private key: %v", ErrTokenKeys, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, "", fmt.Errorf("%w: private key of type %T", ErrTokenKeys, key)
	}
	vk, err := publicVerifyKey(s.Public())
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrTokenKeys, err)
	}
	return key, vk.methods[0], nil
}

// TokenSource gives the token a dialer presents. Token is called for every
// RPC and stream; it may be called concurrently.
type TokenSource interface {
	Token() (string, error)
}

// StaticToken is a TokenSource of a fixed token.
type StaticToken string

// Token implements TokenSource.
func (s StaticToken) Token() (string, error) { return string(s), nil }

// TokenFromFile returns a TokenSource reading the token in path (trimmed)
// and reading it again whenever the file changes (a stat per call; a
// symlink swap counts as a change).
func TokenFromFile(path string) TokenSource { return &fileToken{path: path} }

type fileToken struct {
	path string
	// mu guards the fields below.
	mu    sync.Mutex
	info  os.FileInfo
	token string
}

func (f *fileToken) Token() (string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("security: token file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.info != nil && os.SameFile(f.info, st) && f.info.ModTime().Equal(st.ModTime()) && f.info.Size() == st.Size() {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("security: token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("security: token file %s is empty", f.path)
	}
	f.info, f.token = st, t
	return t, nil
}
