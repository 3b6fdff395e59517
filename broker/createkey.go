package broker

import (
	"bytes"
	"context"
	"errors"

	"github.com/meridianmq/meridian/metadata"
)

// createKey writes value at key if the key is absent (MustNotExist).
//
// A create whose outcome is unknown (metadata.ErrUnknownOutcome: an attempt
// timed out and may have applied; typically the metadata store's own retry
// then found the key present) is settled by reading the key: present with
// exactly value means the create applied, and it is a success with the
// stored version. The value carries its creation time (and, for a ledger
// list, the new ledger's ID), so an identical value is this write; were it
// another writer's identical one, the key would still hold exactly what the
// caller wanted. Anything else (absent, different content, the read
// failing) returns the original error: the caller must not assume either
// outcome.
func createKey(ctx context.Context, store metadata.Store, key string, value []byte) (metadata.KV, error) {
	kv, err := store.Put(ctx, key, value, metadata.MustNotExist, 0)
	if err == nil || !errors.Is(err, metadata.ErrUnknownOutcome) {
		return kv, err
	}
	cur, gerr := store.Get(ctx, key, metadata.ReadOptions{})
	if gerr != nil || !bytes.Equal(cur.Value, value) {
		return kv, err
	}
	return cur, nil
}
