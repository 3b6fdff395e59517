package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Re-replication onto a bookie's new instance (BookKeeper's answer to a
// re-formatted bookie with no spare). A bookie re-formatted with `meridian
// bookie format --force` is decommissioned and in limbo until no ledger
// below its limbo bound lists its old instance. Normally the worker moves
// each of its replicas to another bookie. With exactly E bookies there is
// none outside the ensemble, so the worker instead copies the entries of
// the bookie's write sets from the other replicas onto the bookie's new
// instance (recovery adds, which a bookie in limbo accepts) and then
// records that instance in the ensemble by compare-and-set. A place that
// names the bookie's current (limbo) instance is rebuilt: the auditor does
// not mark it and the worker does not move it, and the bookie's limbo check
// does not count it, so the limbo ends once every old place is rebuilt.

// limboInstances returns, for each decommissioned bookie whose metadata
// cookie is in limbo, the instance that cookie names.
func limboInstances(ctx context.Context, store metadata.Store, decom map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	for id := range decom {
		kv, err := store.Get(ctx, bookie.CookieKey(id), metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("autorecovery: read %s: %w", bookie.CookieKey(id), err)
		}
		var c bookie.Cookie
		if json.Unmarshal(kv.Value, &c) != nil {
			continue
		}
		if c.LimboBelowLedger > 0 && c.InstanceID != "" {
			out[id] = c.InstanceID
		}
	}
	return out, nil
}

// rebuilt reports whether ensemble place b names the current instance of a
// bookie in limbo: its replica was rebuilt there, nothing is lost.
func rebuilt(b topology.BookieInfo, limbo map[string]string) bool {
	inst, ok := limbo[b.ID]
	return ok && b.InstanceID == inst
}
