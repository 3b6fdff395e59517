package broker

import (
	"container/list"
	"encoding/json"
	"sort"
)

// Deduplication state of a topic.
//
// Per producer name a topic remembers the highest sequence ID stored, the
// highest queued, and where the batch holding the highest stored one is
// (its first sequence ID and position), so that a resend of that batch is
// answered with the ID it was first stored under. In memory only, it also
// keeps where the producer's last dedupRecentBatches batches went (written
// here or found by the takeover scan), which covers a producer resending
// its in-flight window after a reconnect. Names are kept in LRU
// order of real last use (a send, stored or not), which is persisted with
// the snapshot, so a takeover keeps the order instead of resetting it.
//
// The snapshot stored with the ledger list holds at most
// maxDedupSnapshotProducers names (the most recently used): the metadata
// value limit (1 MiB) must hold it, at up to about 330 bytes a name. Names
// tracked in memory but left out of the snapshot are not forgotten by a
// move: the snapshot's DedupThrough is kept below the ledgers holding their
// last batches, so the next owner scans those ledgers again and finds them.
// That rescan is bounded (maxDedupRescanEntries, maxDedupRescanBytes); a
// name whose last batch lies further back was among the least recently used
// and is forgotten, as the in-memory LRU would have forgotten it.
const (
	// maxDedupSnapshotProducers and maxDedupSnapshotBytes bound the names
	// stored in the snapshot; the bytes bound (names as JSON, plus their
	// state) keeps names full of escaped characters from pushing the
	// ledger list over the metadata value limit.
	maxDedupSnapshotProducers = 2000
	maxDedupSnapshotBytes     = 640 << 10
	// maxDedupRescanEntries and maxDedupRescanBytes bound what a takeover
	// reads again, beyond the snapshot, to find the producers left out of
	// it: about one ledger at the default rollover limits.
	maxDedupRescanEntries = 50000
	maxDedupRescanBytes   = 256 << 20
	// dedupRecentBatches bounds the recent batch positions kept per
	// producer (about 32 bytes each, allocated as used).
	dedupRecentBatches = 16
)

// batchPos is where the batch [first, last] of a producer is stored.
type batchPos struct {
	first, last int64
	at          pos
}

// dedupSnapStateBytes bounds the JSON of a dedupSnap plus its punctuation,
// and dedupSnapRangeBytes that of one interval of its R.
const (
	dedupSnapStateBytes = 140
	dedupSnapRangeBytes = 44
)

// dedupSnap is one producer in the stored snapshot.
type dedupSnap struct {
	// Seq is the highest sequence ID stored.
	Seq int64 `json:"s"`
	// First is the first sequence ID of the batch holding Seq, stored at
	// ledger L, entry E (E < 0: position unknown).
	First int64 `json:"f"`
	L     int64 `json:"l"`
	E     int64 `json:"e"`
	// Used is the producer's last use, Unix ms.
	Used int64 `json:"u"`
	// R is the exact set of stored sequence IDs of a failover-identity key
	// (ident_dedup.go), as intervals; absent for other keys.
	R [][2]int64 `json:"r,omitempty"`
	// O is the role the producer is bound to (producer_bind.go); absent
	// when unbound.
	O string `json:"o,omitempty"`
}

// dedupProducer is what a topic remembers about one producer name.
type dedupProducer struct {
	name   string
	stored int64 // highest sequence ID stored (-1: none)
	pushed int64 // highest sequence ID queued (>= stored)
	first  int64 // first sequence ID of the batch holding stored
	at     pos   // where that batch is
	known  bool  // at is known
	usedMs int64 // last use, Unix ms
	elem   *list.Element
	// recent holds the last stored batches (a ring once full; next is
	// where the next one goes).
	recent []batchPos
	next   int
	// ranges is the exact set of stored sequence IDs of a
	// failover-identity key (ident_dedup.go); nil for other keys.
	ranges *seqRanges
	// role is the authenticated role the name is bound to ("" unbound;
	// producer_bind.go).
	role string
}

// remember adds a stored batch to the recent ring.
func (p *dedupProducer) remember(b batchPos) {
	if len(p.recent) < dedupRecentBatches {
		p.recent = append(p.recent, b)
		return
	}
	p.recent[p.next] = b
	p.next = (p.next + 1) % dedupRecentBatches
}

// find returns where the message with sequence seq was stored, if known.
func (p *dedupProducer) find(seq int64) (pos, int32, bool) {
	if p.known && seq >= p.first && seq <= p.stored {
		return p.at, int32(seq - p.first), true
	}
	for _, b := range p.recent {
		if seq >= b.first && seq <= b.last {
			return b.at, int32(seq - b.first), true
		}
	}
	return pos{}, 0, false
}

// dedupTable tracks producers in LRU order of last use. It is a plain data
// structure: the managed ledger guards it with its mutex.
type dedupTable struct {
	max    int
	byName map[string]*dedupProducer
	lru    *list.List // of *dedupProducer, front = most recently used
	// pending holds the queued, not yet stored batches of failover-identity
	// keys (ident_dedup.go), in memory only.
	pending map[string][]*identPending
	// maxStreams bounds the origin streams kept per origin region
	// (Config.MaxOriginIncarnations, originstream.go); 0 = no bound.
	maxStreams int
}

func newDedupTable(maxNames int) *dedupTable {
	return &dedupTable{max: maxNames, byName: map[string]*dedupProducer{}, lru: list.New()}
}

// len returns the number of tracked names.
func (d *dedupTable) len() int { return len(d.byName) }

// restore loads a stored snapshot (and the sequence-only snapshot written
// by earlier versions). Call order() once everything is loaded.
func (d *dedupTable) restore(snap map[string]dedupSnap, legacy map[string]int64) {
	for name, seq := range legacy {
		d.upsert(name).raise(seq, seq, pos{}, false)
	}
	for name, s := range snap {
		p := d.upsert(name)
		p.raise(s.Seq, s.First, pos{s.L, s.E}, s.E >= 0)
		p.usedMs = max(p.usedMs, s.Used)
		if p.role == "" {
			p.role = s.O
		}
		if len(s.R) > 0 && isIdentName(name) {
			p.ranges = &seqRanges{}
			p.ranges.load(s.R, maxIdentRanges)
		}
	}
}

// observe records a batch found in a ledger scan, stored at at and last
// used at usedMs. Every producer found is tracked, whatever the limit.
func (d *dedupTable) observe(name string, first, highest int64, at pos, usedMs int64) {
	p := d.upsert(name)
	p.raise(highest, first, at, true)
	p.remember(batchPos{first, highest, at})
	p.usedMs = max(p.usedMs, usedMs)
}

// order rebuilds the LRU order from the last-use times (after restore and
// observe).
func (d *dedupTable) order() {
	ps := make([]*dedupProducer, 0, len(d.byName))
	for _, p := range d.byName {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].usedMs != ps[j].usedMs {
			return ps[i].usedMs < ps[j].usedMs
		}
		return ps[i].name < ps[j].name
	})
	d.lru.Init()
	for _, p := range ps {
		p.elem = d.lru.PushFront(p)
	}
}

// upsert returns the producer, adding it (unordered) when absent.
func (d *dedupTable) upsert(name string) *dedupProducer {
	p, ok := d.byName[name]
	if !ok {
		p = &dedupProducer{name: name, stored: -1, pushed: -1, first: -1}
		d.byName[name] = p
	}
	return p
}

// raise records a stored batch [first, highest] at at if it is the highest.
func (p *dedupProducer) raise(highest, first int64, at pos, known bool) {
	if highest >= p.stored {
		p.stored, p.first, p.at, p.known = highest, first, at, known
	}
	p.pushed = max(p.pushed, p.stored)
}

// touch marks p used at nowMs.
func (d *dedupTable) touch(p *dedupProducer, nowMs int64) {
	p.usedMs = max(p.usedMs, nowMs)
	if p.elem == nil {
		p.elem = d.lru.PushFront(p)
	} else {
		d.lru.MoveToFront(p.elem)
	}
}

// check answers a send of [seq, highest] by producer at nowMs. A send not
// above the highest queued sequence is a duplicate: stored tells whether
// the original is stored (else it is still in flight), and known whether id
// is where the send's first message was first stored. Otherwise the batch
// is recorded as queued; a new name makes room by forgetting the least
// recently used one when max names are tracked.
func (d *dedupTable) check(name string, seq, highest, nowMs int64) (dup, stored bool, id pos, batchIndex int32, known bool) {
	p, ok := d.byName[name]
	if ok {
		d.touch(p, nowMs)
		if seq <= p.pushed {
			stored = seq <= p.stored
			if stored {
				id, batchIndex, known = p.find(seq)
			}
			return true, stored, id, batchIndex, known
		}
	} else {
		// One out per new name: producers found in scanned ledgers may
		// exceed max, and they stay tracked until they are the least
		// recently used.
		if len(d.byName) >= d.max {
			d.evictOne()
		}
		p = d.upsert(name)
		d.touch(p, nowMs)
	}
	p.pushed = highest
	return false, false, pos{}, 0, false
}

// evictOne forgets the least recently used name that is not pinned:
// replication pseudo-producers (meridian.repl.*) hold the highest applied
// origin_seq of each origin region and are never forgotten.
func (d *dedupTable) evictOne() {
	for e := d.lru.Back(); e != nil; e = e.Prev() {
		p := e.Value.(*dedupProducer)
		if isReplName(p.name) {
			continue
		}
		d.lru.Remove(e)
		delete(d.byName, p.name)
		return
	}
}

// unpush forgets a queued batch that will not be stored, so that its
// resend is not mistaken for a duplicate still in flight.
func (d *dedupTable) unpush(name string, highest int64) {
	if p, ok := d.byName[name]; ok && p.pushed == highest {
		p.pushed = p.stored
	}
}

// stored records that batch [first, highest] of name is stored at at.
func (d *dedupTable) stored(name string, first, highest int64, at pos, nowMs int64) {
	p := d.upsert(name)
	p.raise(highest, first, at, true)
	p.remember(batchPos{first, highest, at})
	d.touch(p, nowMs)
}

// lastSequence returns the highest sequence ID queued or stored (-1 none).
func (d *dedupTable) lastSequence(name string) int64 {
	if p, ok := d.byName[name]; ok {
		return p.pushed
	}
	return -1
}

// snapshot returns the snapshot to store with a ledger list whose ledgers
// with Seq <= covered have all been seen by this table, and the
// DedupThrough to store with it: covered, or lower so that the next owner
// rescans the ledgers holding the last batches of the names left out of the
// snapshot (within the rescan bounds).
func (d *dedupTable) snapshot(ledgers []ledgerInfo, covered int64) (map[string]dedupSnap, int64) {
	seqOf := make(map[int64]int64, len(ledgers))
	for _, li := range ledgers {
		seqOf[li.ID] = li.Seq
	}
	snap := make(map[string]dedupSnap, min(len(d.byName), maxDedupSnapshotProducers))
	through := covered
	size := 0
	for e := d.lru.Front(); e != nil; e = e.Next() {
		p := e.Value.(*dedupProducer)
		if p.stored < 0 {
			continue // queued only: nothing stored to remember
		}
		// Replication pseudo-producers (one per origin region) are always
		// in the snapshot, whatever the limits.
		if isReplName(p.name) || len(snap) < maxDedupSnapshotProducers && size < maxDedupSnapshotBytes {
			n, _ := json.Marshal(p.name)
			size += len(n) + dedupSnapStateBytes
			s := dedupSnap{Seq: p.stored, First: p.first, L: p.at.L, E: p.at.E, Used: p.usedMs, O: p.role}
			if p.role != "" {
				r, _ := json.Marshal(p.role)
				size += len(r) + 6 // ,"o":
			}
			if p.ranges != nil {
				s.R = p.ranges.intervals()
				size += len(s.R) * dedupSnapRangeBytes
			}
			if !p.known {
				s.L, s.E = -1, -1
			}
			snap[p.name] = s
			continue
		}
		if seq, ok := seqOf[p.at.L]; ok && p.known && seq <= through {
			through = seq - 1
		}
	}
	// Bound the rescan: walk back from covered while within the limits.
	sorted := append([]ledgerInfo(nil), ledgers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Seq < sorted[j].Seq })
	var entries, bytes int64
	limit := covered
	for i := len(sorted) - 1; i >= 0; i-- {
		li := sorted[i]
		if li.Seq > covered {
			continue
		}
		if li.Seq <= through {
			break
		}
		entries += max(li.Entries, 0)
		bytes += li.Size
		if entries > maxDedupRescanEntries || bytes > maxDedupRescanBytes {
			break
		}
		limit = li.Seq - 1
	}
	return snap, max(through, limit)
}
