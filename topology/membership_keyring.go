package topology

import (
	"bytes"
	"fmt"
	"log/slog"

	"github.com/hashicorp/memberlist"
	"github.com/meridianmq/meridian/security"
)

// Gossip encryption. With MembershipConfig.KeyFile set, every gossip
// packet and stream is encrypted and authenticated (AES-GCM) with
// memberlist's keyring, and messages that are not (a member without the
// key, a forged packet) are refused. The file holds one base64 key per
// line (security.ParseGossipKeys), the first the primary used to encrypt;
// every key decrypts. The file is watched and reloaded: keys that
// appeared are added, the first becomes primary, keys that left are
// removed. A rotation without a partition is three edits applied to every
// member in turn, each edit on all members before the next:
//
//  1. append the new key (old primary stays primary; all can decrypt new);
//  2. move the new key first (all encrypt with it; old still decrypts);
//  3. remove the old key.
//
// A file that fails to parse keeps the keyring as it is (logged, counted
// in meridian_membership_keyring_reload_failures_total).

// newKeyring builds the keyring of a key file.
func newKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := security.LoadGossipKeys(path)
	if err != nil {
		return nil, fmt.Errorf("%w: KeyFile: %v", ErrInvalidArgument, err)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("%w: KeyFile %s: %v", ErrInvalidArgument, path, err)
	}
	return kr, nil
}

// reloadKeys applies the key file to the running keyring.
func (m *Membership) reloadKeys() {
	keys, err := security.LoadGossipKeys(m.cfg.KeyFile)
	if err != nil {
		m.metrics.keyReloadFailures.Inc()
		m.log.Error("gossip key file not reloaded; the keyring stays as it was", "key_file", m.cfg.KeyFile, "err", err)
		return
	}
	if err := applyKeys(m.keyring, keys); err != nil {
		m.metrics.keyReloadFailures.Inc()
		m.log.Error("gossip keyring not updated", "key_file", m.cfg.KeyFile, "err", err)
		return
	}
}

// applyKeys makes kr hold exactly keys with keys[0] primary: add first,
// switch the primary, then remove (the primary cannot be removed).
func applyKeys(kr *memberlist.Keyring, keys [][]byte) error {
	have := kr.GetKeys()
	if bytes.Equal(kr.GetPrimaryKey(), keys[0]) && sameKeys(have, keys) {
		return nil
	}
	for _, k := range keys {
		if !containsKey(have, k) {
			if err := kr.AddKey(k); err != nil {
				return err
			}
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return err
	}
	for _, k := range have {
		if !containsKey(keys, k) {
			if err := kr.RemoveKey(k); err != nil {
				return err
			}
		}
	}
	return nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

func sameKeys(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for _, k := range a {
		if !containsKey(b, k) {
			return false
		}
	}
	return true
}

// Keys returns the gossip keyring's primary key and every installed key
// (nil without KeyFile). The slices must not be modified.
func (m *Membership) Keys() (primary []byte, all [][]byte) {
	if m.keyring == nil {
		return nil, nil
	}
	return m.keyring.GetPrimaryKey(), m.keyring.GetKeys()
}

// watchKeys starts reloading the key file on change.
func (m *Membership) watchKeys(log *slog.Logger) error {
	w, err := security.WatchFiles([]string{m.cfg.KeyFile}, m.cfg.KeyReloadInterval, log, m.reloadKeys)
	if err != nil {
		return err
	}
	m.keyWatch = w
	return nil
}
