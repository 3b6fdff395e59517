package broker

import (
	"bytes"
	"context"
	"errors"

	"github.com/meridianmq/meridian/metadata"
)

// createKey writes value at key if the key is absent (MustNotExist), in
// session (0: a persistent key).
//
// A create whose outcome is unknown (metadata.ErrUnknownOutcome: an attempt
// timed out and may have applied; typically the metadata store's own retry
// then found the key present) is settled by reading the key: present with
// exactly value, in the same session, means the create applied, and it is
// a success with the stored version. A cursor's or ledger list's value
// carries its creation time (and, for a ledger list, the new ledger's ID),
// so an identical value is this write; an ownership claim's value is this
// broker's record, and its session is this process's. Were it another
// writer's identical key, the key would still hold exactly what the caller
// wanted. Anything else (absent, different content or session, the read
// failing) returns the original error: the caller must not assume either
// outcome.
func createKey(ctx context.Context, store metadata.Store, key string, value []byte, session metadata.SessionID) (metadata.KV, error) {
	kv, err := store.Put(ctx, key, value, metadata.MustNotExist, session)
	if err == nil || !errors.Is(err, metadata.ErrUnknownOutcome) {
		return kv, err
	}
	cur, gerr := store.Get(ctx, key, metadata.ReadOptions{})
	if gerr != nil || !bytes.Equal(cur.Value, value) || cur.Session != session {
		return kv, err
	}
	return cur, nil
}
