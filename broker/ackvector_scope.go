package broker

import (
	"math"
	"slices"
	"strings"
	"sync"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Scoped claims (see the comment at the top of ackvector.go).
//
// Which regions an entry is for is in its metadata, the same in every
// region: its origin region always has it; other regions only when it is
// not local-only (disable_replication) and its replicate_to, if set, names
// them. A scoped claim of region R ("R>stream") states R's
// acknowledgements and the origin_seq values R's senders reported as not
// for R; it holds only for the entries that are for R, so a receiver asks
// entryScope before applying it.

// scopeSep separates the claiming region from the origin stream in a
// scoped key; region and stream names never contain it (ValidateName).
const scopeSep = ">"

// scopedKey is the key of region's scoped claim about stream.
func scopedKey(region, stream string) string { return region + scopeSep + stream }

// splitScoped splits a scoped key (ok false for an exact one).
func splitScoped(key string) (region, stream string, ok bool) {
	return strings.Cut(key, scopeSep)
}

// entryScope says which regions an entry is for, besides its origin
// region: scopeAll (replicated everywhere), scopeLocal (disable_replication)
// or an interned replicate_to list (scopeLists). scopeUnknown is an entry
// whose list could not be interned: only its origin region's and this
// region's claims apply to it (fewer claims: redelivery, never a skip).
type entryScope uint32

const (
	scopeAll     entryScope = 0
	scopeLocal   entryScope = 1
	scopeUnknown entryScope = math.MaxUint32
)

// maxScopeLists bounds the distinct replicate_to lists interned (a
// handful in practice: they are sets of region names).
const maxScopeLists = 4096

// scopeLists interns replicate_to lists: id-2 indexes lists.
var scopeLists struct {
	mu    sync.Mutex
	ids   map[string]entryScope
	lists [][]string
}

// scopeOf returns the scope of an entry with metadata md.
func scopeOf(md *clientv1.EntryMetadata) entryScope {
	switch {
	case md.GetDisableReplication():
		return scopeLocal
	case len(md.GetReplicateTo()) == 0:
		return scopeAll
	}
	list := slices.Clone(md.GetReplicateTo())
	slices.Sort(list)
	list = slices.Compact(list)
	key := strings.Join(list, ",")
	scopeLists.mu.Lock()
	defer scopeLists.mu.Unlock()
	if id, ok := scopeLists.ids[key]; ok {
		return id
	}
	if len(scopeLists.lists) >= maxScopeLists {
		return scopeUnknown
	}
	if scopeLists.ids == nil {
		scopeLists.ids = map[string]entryScope{}
	}
	id := entryScope(len(scopeLists.lists) + 2)
	scopeLists.ids[key] = id
	scopeLists.lists = append(scopeLists.lists, list)
	return id
}

// includes reports whether an entry of scope sc is for region (its
// origin region aside, which the caller checks).
func (sc entryScope) includes(region string) bool {
	switch sc {
	case scopeAll:
		return true
	case scopeLocal, scopeUnknown:
		return false
	}
	scopeLists.mu.Lock()
	list := scopeLists.lists[sc-2]
	scopeLists.mu.Unlock()
	_, ok := slices.BinarySearch(list, region)
	return ok
}

// claimApplies reports whether a scoped claim of region claimer holds for
// the entry with origin key k stored in region self: the entry is for the
// claimer (it is stored here, so it is for self).
func (k originKey) claimApplies(claimer, self string) bool {
	if claimer == self {
		return true
	}
	if origin, _ := splitOriginStream(k.Region); claimer == origin {
		return true
	}
	return k.Scope.includes(claimer)
}

// coversEntry reports whether v acknowledges the entry with origin key k
// stored in region self: an exact claim of its stream, or a scoped claim
// of a region the entry is for.
func (v ackVector) coversEntry(k originKey, self string) bool {
	if v.covers(k.Region, k.Seq) {
		return true
	}
	for key, o := range v {
		claimer, stream, ok := splitScoped(key)
		if ok && stream == k.Region && o.covers(k.Seq) && k.claimApplies(claimer, self) {
			return true
		}
	}
	return false
}

// batchOfEntry returns the acknowledged batch indexes of the entry with
// origin key k stored in region self (as batchOf, over the exact claim and
// the scoped claims that hold for it). The result may be shared with v
// when one claim has them: do not modify it.
func (v ackVector) batchOfEntry(k originKey, self string) []uint64 {
	out := v.batchOf(k.Region, k.Seq)
	owned := false
	for key, o := range v {
		claimer, stream, ok := splitScoped(key)
		if !ok || stream != k.Region {
			continue
		}
		ws := o.Batch[k.Seq]
		if len(ws) == 0 || !k.claimApplies(claimer, self) {
			continue
		}
		if out == nil {
			out = ws
			continue
		}
		if !owned {
			out, owned = slices.Clone(out), true
		}
		for i, w := range ws {
			if i >= len(out) {
				out = append(out, ws[i:]...)
				break
			}
			out[i] |= w
		}
	}
	return out
}

// ownKey is the key under which region self records its own
// acknowledgement of an entry of stream: exact for its own origin's
// entries (all stored here), its scoped claim for the others'.
func ownKey(self, stream string) string {
	if origin, _ := splitOriginStream(stream); origin == self {
		return stream
	}
	return scopedKey(self, stream)
}

// foldForeign folds, for every other origin's stream, the exact claim's
// acknowledgements above its mark-delete (ranges and batch indexes) into
// region self's scoped claim, keeping only the mark-delete exact (see the
// comment at the top of ackvector.go). For the entries stored here it
// acknowledges exactly what it did: self's claim holds for all of them.
// It reports whether v changed.
func (v ackVector) foldForeign(self string, lim *vecLimits) bool {
	changed := false
	for key, o := range v {
		if _, _, scoped := splitScoped(key); scoped || len(o.Ranges) == 0 && len(o.Batch) == 0 {
			continue
		}
		if origin, _ := splitOriginStream(key); origin == self {
			continue
		}
		v.joinLim(ackVector{scopedKey(self, key): o}, lim)
		v[key] = &originAcks{MD: o.MD}
		changed = true
	}
	return changed
}
