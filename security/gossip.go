package security

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrGossipKeys marks a gossip key file that cannot be used.
var ErrGossipKeys = errors.New("security: gossip key file")

// MaxGossipKeys bounds the keys of a gossip key file (16): a rotation
// needs two or three; memberlist tries every key on every packet it
// receives, so a long list costs CPU on the gossip path.
const MaxGossipKeys = 16

// ParseGossipKeys parses a gossip key file: one base64 key per line (16,
// 24 or 32 bytes: AES-128/192/256), the first the primary (used to
// encrypt), the others accepted to decrypt (rotation). Blank lines and
// lines starting with # are skipped.
func ParseGossipKeys(b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d is not base64", ErrGossipKeys, line)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%w: line %d: key of %d bytes, want 16, 24 or 32", ErrGossipKeys, line, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrGossipKeys)
	}
	if len(keys) > MaxGossipKeys {
		return nil, fmt.Errorf("%w: %d keys, at most %d", ErrGossipKeys, len(keys), MaxGossipKeys)
	}
	return keys, nil
}

// LoadGossipKeys reads and parses a gossip key file (ParseGossipKeys).
func LoadGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGossipKeys, err)
	}
	keys, err := ParseGossipKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// GenerateGossipKey returns a new base64 AES-256 gossip key (a line of a
// gossip key file).
func GenerateGossipKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
