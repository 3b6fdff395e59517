package metadata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/btree"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// stateMachine is the Dragonboat state machine of one shard: a versioned
// key-value map, sessions and a bounded history of changes for watches.
//
// It is deterministic: the only inputs are the commands (time included) and
// the iteration orders are sorted. Dragonboat serialises Update against
// Lookup and SaveSnapshot with its own RWMutex, so there is no lock here.
type stateMachine struct {
	shardID uint64
	// limits bound the history kept for watch resume.
	historyEvents int
	historyBytes  int
	// notify is poked after every Update that produced events; it never
	// blocks and is not part of the replicated state.
	notify *notifier

	st smState
	// keys is st.KVs' key set in order, for List and prefix scans: a
	// B-tree, so that a new or deleted key costs O(log n), not the move of
	// half a sorted slice (BenchmarkStateMachinePutNewKey).
	keys *btree.BTreeG[string]
	// histBytes is the approximate size of st.Hist.
	histBytes int
	// totalBytes is the bytes of keys plus values in st.KVs, and owners
	// the live sessions of each st.Sessions owner: derived from st, kept
	// up to date by putKey, deleteKey and endSession, and recomputed from
	// the state on RecoverFromSnapshot (never stored).
	totalBytes int64
	owners     map[string]int64
}

// smState is the replicated state, also the snapshot format.
type smState struct {
	Rev int64 `json:"rev"`
	// LastTime is the session clock (Unix ns): the largest time proposed by
	// a tick, which only a shard leader proposes. Sessions expire by it.
	LastTime int64 `json:"time"`
	// MaxSkew (ns) is how far after LastTime another command's proposer
	// time may fall; set by ticks from the leader's config.
	MaxSkew      int64                 `json:"skew,omitempty"`
	NextSession  uint64                `json:"nextSession"`
	KVs          map[string]*KV        `json:"kvs"`
	Sessions     map[uint64]*smSession `json:"sessions"`
	Hist         []Event               `json:"hist"`
	CompactedRev int64                 `json:"compacted"`
}

// smSession is one live session.
type smSession struct {
	TTL      int64               `json:"ttl"`
	Deadline int64               `json:"deadline"`
	Keys     map[string]struct{} `json:"keys"`
	// Owner is the client the session counts against for
	// max_sessions_per_client ("" = none, as in older snapshots).
	Owner string `json:"owner,omitempty"`
}

// keyIndexDegree is the degree of the key B-tree (nodes of up to 63 keys).
const keyIndexDegree = 32

func newKeyIndex() *btree.BTreeG[string] { return btree.NewOrderedG[string](keyIndexDegree) }

func newStateMachine(shardID uint64, historyEvents, historyBytes int, n *notifier) *stateMachine {
	return &stateMachine{
		shardID:       shardID,
		historyEvents: historyEvents,
		historyBytes:  historyBytes,
		notify:        n,
		keys:          newKeyIndex(),
		owners:        map[string]int64{},
		st: smState{
			NextSession: 1,
			KVs:         map[string]*KV{},
			Sessions:    map[uint64]*smSession{},
		},
	}
}

// Update applies one committed command. It never returns an error.
func (s *stateMachine) Update(e sm.Entry) (sm.Result, error) {
	var c command
	if err := json.Unmarshal(e.Cmd, &c); err != nil {
		return sm.Result{Value: codeInvalid, Data: encodeResult(cmdResult{Msg: "undecodable command: " + err.Error()})}, nil
	}
	// Only the leader's ticks move the session clock; other commands use
	// their proposer's time, bounded by the skew the leader allows.
	now := s.proposerTime(c.Now)
	if c.Type == cmdTick {
		if c.Now > s.st.LastTime {
			s.st.LastTime = c.Now
		}
		if c.MaxSkew > 0 {
			s.st.MaxSkew = c.MaxSkew
		}
		now = s.st.LastTime
	}
	before := s.st.Rev
	var code uint64
	var res cmdResult
	switch c.Type {
	case cmdTxn:
		code, res = s.applyTxn(c.Ops, c.MaxKeys, c.MaxBytes)
	case cmdCreateSess:
		if c.Client != "" && c.MaxSessions > 0 && s.owners[c.Client] >= c.MaxSessions {
			code, res.Msg = codeLimitExceeded, fmt.Sprintf("max_sessions_per_client %d reached: client %q has %d live sessions", c.MaxSessions, c.Client, s.owners[c.Client])
			break
		}
		id := s.st.NextSession
		s.st.NextSession++
		s.st.Sessions[id] = &smSession{TTL: c.TTL, Deadline: now + c.TTL, Keys: map[string]struct{}{}, Owner: c.Client}
		if c.Client != "" {
			s.owners[c.Client]++
		}
		res.Session = id
	case cmdKeepAlive:
		ss, ok := s.liveSession(c.Session)
		if !ok {
			code, res.Msg = codeSessionExpired, fmt.Sprintf("session %d", c.Session)
			break
		}
		ss.Deadline = max(ss.Deadline, now+ss.TTL)
	case cmdCloseSession:
		if _, ok := s.st.Sessions[c.Session]; !ok {
			code, res.Msg = codeSessionExpired, fmt.Sprintf("session %d", c.Session)
			break
		}
		s.endSession(c.Session)
	case cmdTick:
		res.Expired = s.tick(c.Renew)
	default:
		code, res.Msg = codeInvalid, fmt.Sprintf("unknown command type %q", c.Type)
	}
	if s.st.Rev != before && s.notify != nil {
		s.notify.poke()
	}
	return sm.Result{Value: code, Data: encodeResult(res)}, nil
}

// proposerTime bounds a proposer's clock reading to the session clock: not
// before the leader's last tick (a slow proposer cannot shorten a session
// below what the leader would give) and not more than MaxSkew after it (a
// fast proposer cannot lengthen one by more than the skew). Before the first
// tick there is no session clock and the proposer's time is taken as is.
func (s *stateMachine) proposerTime(t int64) int64 {
	if s.st.LastTime == 0 {
		return t
	}
	return min(max(t, s.st.LastTime), s.st.LastTime+s.st.MaxSkew)
}

// liveSession returns a session whose deadline has not passed at the state
// machine's current time.
func (s *stateMachine) liveSession(id uint64) (*smSession, bool) {
	ss, ok := s.st.Sessions[id]
	if !ok || ss.Deadline < s.st.LastTime {
		return nil, false
	}
	return ss, true
}

// tick renews sessions (on a new leader) and expires those whose deadline
// passed, in session ID order so every replica assigns the same revisions.
func (s *stateMachine) tick(renew bool) int {
	now := s.st.LastTime
	ids := make([]uint64, 0, len(s.st.Sessions))
	for id := range s.st.Sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	expired := 0
	for _, id := range ids {
		ss := s.st.Sessions[id]
		if renew && ss.Deadline < now+ss.TTL {
			ss.Deadline = now + ss.TTL
		}
		if ss.Deadline < now {
			s.endSession(id)
			expired++
		}
	}
	return expired
}

// endSession removes a session and deletes its ephemeral keys in key order.
func (s *stateMachine) endSession(id uint64) {
	ss := s.st.Sessions[id]
	delete(s.st.Sessions, id)
	if ss.Owner != "" {
		if s.owners[ss.Owner]--; s.owners[ss.Owner] <= 0 {
			delete(s.owners, ss.Owner)
		}
	}
	keys := make([]string, 0, len(ss.Keys))
	for k := range ss.Keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if kv, ok := s.st.KVs[k]; ok && uint64(kv.Session) == id {
			s.deleteKey(k)
		}
	}
}

// applyTxn checks every guard against the current state, then the limits
// the command carries (maxKeys, maxBytes; 0 = unlimited), then applies every
// op, each with its own revision, so that a watch resuming from any revision
// never skips part of a transaction.
func (s *stateMachine) applyTxn(ops []cmdOp, maxKeys, maxBytes int64) (uint64, cmdResult) {
	seen := make(map[string]int, len(ops))
	for i, op := range ops {
		if op.Key == "" {
			return codeInvalid, cmdResult{Msg: fmt.Sprintf("ops[%d].key is empty", i)}
		}
		if j, dup := seen[op.Key]; dup {
			return codeInvalid, cmdResult{Msg: fmt.Sprintf("ops[%d].key %q repeats ops[%d].key", i, op.Key, j)}
		}
		seen[op.Key] = i
		cur, exists := s.st.KVs[op.Key]
		switch {
		case op.Expected == MustNotExist:
			if exists {
				return codeVersionMismatch, cmdResult{Msg: fmt.Sprintf("key %q exists (version %d), expected absent", op.Key, cur.Version)}
			}
		case op.Expected > 0:
			if !exists {
				return codeVersionMismatch, cmdResult{Msg: fmt.Sprintf("key %q is absent, expected version %d", op.Key, op.Expected)}
			}
			if cur.Version != op.Expected {
				return codeVersionMismatch, cmdResult{Msg: fmt.Sprintf("key %q has version %d, expected %d", op.Key, cur.Version, op.Expected)}
			}
		case op.Expected < MustNotExist:
			return codeInvalid, cmdResult{Msg: fmt.Sprintf("ops[%d].expected_version %d is below -1", i, op.Expected)}
		}
		switch op.Type {
		case OpPut:
			if op.Session != 0 {
				if _, ok := s.liveSession(op.Session); !ok {
					return codeSessionExpired, cmdResult{Msg: fmt.Sprintf("key %q: session %d", op.Key, op.Session)}
				}
			}
		case OpDelete:
			if !exists && op.Expected != MustNotExist {
				return codeNotFound, cmdResult{Msg: fmt.Sprintf("key %q", op.Key)}
			}
		case OpCheck:
		default:
			return codeInvalid, cmdResult{Msg: fmt.Sprintf("ops[%d].type %d is unknown", i, op.Type)}
		}
	}
	if msg := s.checkQuota(ops, maxKeys, maxBytes); msg != "" {
		return codeLimitExceeded, cmdResult{Msg: msg}
	}
	out := make([]KV, 0, len(ops))
	for _, op := range ops {
		switch op.Type {
		case OpPut:
			out = append(out, s.putKey(op.Key, op.Value, SessionID(op.Session)))
		case OpDelete:
			if kv, ok := s.st.KVs[op.Key]; ok {
				prev := *kv
				prev.Value = nil
				s.deleteKey(op.Key)
				prev.ModRevision = s.st.Rev
				out = append(out, prev)
			} else {
				out = append(out, KV{Key: op.Key})
			}
		case OpCheck:
			if kv, ok := s.st.KVs[op.Key]; ok {
				out = append(out, *kv)
			} else {
				out = append(out, KV{Key: op.Key})
			}
		}
	}
	return codeOK, cmdResult{KVs: out}
}

// checkQuota returns why ops would take the shard past max_keys or
// max_total_bytes ("" if they would not). Only growth is refused: a transaction that shrinks the
// shard, or replaces a value with one no larger, passes even when the shard
// is over a limit (lowered since, or never enforced by older proposers).
func (s *stateMachine) checkQuota(ops []cmdOp, maxKeys, maxBytes int64) string {
	var dKeys, dBytes int64
	for _, op := range ops {
		cur, exists := s.st.KVs[op.Key]
		switch {
		case op.Type == OpPut && exists:
			dBytes += int64(len(op.Value)) - int64(len(cur.Value))
		case op.Type == OpPut:
			dKeys++
			dBytes += int64(len(op.Key) + len(op.Value))
		case op.Type == OpDelete && exists:
			dKeys--
			dBytes -= int64(len(op.Key) + len(cur.Value))
		}
	}
	if keys := int64(len(s.st.KVs)); maxKeys > 0 && dKeys > 0 && keys+dKeys > maxKeys {
		return fmt.Sprintf("max_keys %d reached: the shard holds %d keys and the request adds %d", maxKeys, keys, dKeys)
	}
	if maxBytes > 0 && dBytes > 0 && s.totalBytes+dBytes > maxBytes {
		return fmt.Sprintf("max_total_bytes %d reached: the shard holds %d bytes of keys and values and the request adds %d", maxBytes, s.totalBytes, dBytes)
	}
	return ""
}

func (s *stateMachine) putKey(key string, value []byte, session SessionID) KV {
	s.st.Rev++
	kv, exists := s.st.KVs[key]
	if !exists {
		kv = &KV{Key: key, CreateRevision: s.st.Rev}
		s.st.KVs[key] = kv
		s.keys.ReplaceOrInsert(key)
		s.totalBytes += int64(len(key))
	}
	if kv.Session != 0 && kv.Session != session {
		if old, ok := s.st.Sessions[uint64(kv.Session)]; ok {
			delete(old.Keys, key)
		}
	}
	if session != 0 {
		s.st.Sessions[uint64(session)].Keys[key] = struct{}{}
	}
	if value == nil {
		value = []byte{}
	}
	s.totalBytes += int64(len(value)) - int64(len(kv.Value))
	kv.Value = value
	kv.Version++
	kv.ModRevision = s.st.Rev
	kv.Session = session
	s.record(Event{Type: EventPut, Revision: s.st.Rev, KV: *kv})
	return *kv
}

func (s *stateMachine) deleteKey(key string) {
	kv := s.st.KVs[key]
	s.st.Rev++
	delete(s.st.KVs, key)
	s.totalBytes -= int64(len(key) + len(kv.Value))
	s.keys.Delete(key)
	if kv.Session != 0 {
		if ss, ok := s.st.Sessions[uint64(kv.Session)]; ok {
			delete(ss.Keys, key)
		}
	}
	s.record(Event{Type: EventDelete, Revision: s.st.Rev, KV: KV{
		Key: key, Version: kv.Version, CreateRevision: kv.CreateRevision, ModRevision: s.st.Rev, Session: kv.Session,
	}})
}

// record appends to the history and drops the oldest events beyond the
// count and byte bounds; CompactedRev remembers the newest dropped revision.
func (s *stateMachine) record(ev Event) {
	s.st.Hist = append(s.st.Hist, ev)
	s.histBytes += eventSize(ev)
	drop := 0
	for len(s.st.Hist)-drop > s.historyEvents || (s.histBytes > s.historyBytes && len(s.st.Hist)-drop > 1) {
		s.histBytes -= eventSize(s.st.Hist[drop])
		s.st.CompactedRev = s.st.Hist[drop].Revision
		drop++
	}
	if drop > 0 {
		// Copy when the dropped prefix is large so the backing array does
		// not pin old events forever.
		if drop > len(s.st.Hist)/2 {
			s.st.Hist = append([]Event(nil), s.st.Hist[drop:]...)
		} else {
			clear(s.st.Hist[:drop])
			s.st.Hist = s.st.Hist[drop:]
		}
	}
}

func eventSize(ev Event) int { return len(ev.KV.Key) + len(ev.KV.Value) + 64 }

// Queries understood by Lookup.
type (
	getQuery  struct{ Key string }
	listQuery struct {
		Prefix, After string
		Limit         int
	}
	// histQuery asks for events with Revision > After and the prefix.
	histQuery struct {
		Prefix string
		After  int64
		Limit  int
	}
	histResult struct {
		Events []Event
		// ScannedTo is the newest revision examined; the next query may
		// start after it.
		ScannedTo int64
		More      bool
		Compacted bool
		// CompactedRev is the newest revision no longer in the history.
		CompactedRev int64
	}
	getResult struct {
		KV    KV
		Found bool
		Rev   int64
	}
	// sessionDueQuery asks whether some session's deadline is before Now,
	// and for the session clock.
	sessionDueQuery  struct{ Now int64 }
	sessionDueResult struct {
		Due      bool
		Sessions int
		// Clock is the session clock (Unix ns, 0 before the first tick).
		Clock int64
	}
	// statsQuery returns counts for tests and metrics.
	statsQuery  struct{}
	statsResult struct {
		Keys, Sessions, HistEvents int
		Rev, CompactedRev          int64
		// Bytes is the bytes of keys plus values stored.
		Bytes    int64
		LastTime time.Time
	}
)

// Lookup answers read queries. Returned values are copies.
func (s *stateMachine) Lookup(q interface{}) (interface{}, error) {
	switch q := q.(type) {
	case getQuery:
		kv, ok := s.st.KVs[q.Key]
		if !ok {
			return getResult{Rev: s.st.Rev}, nil
		}
		return getResult{KV: copyKV(*kv), Found: true, Rev: s.st.Rev}, nil
	case listQuery:
		// From the prefix, or from just after After when that is later.
		start, after := q.Prefix, q.After != "" && q.After >= q.Prefix
		if after {
			start = q.After
		}
		res := ListResult{Revision: s.st.Rev}
		s.keys.AscendGreaterOrEqual(start, func(k string) bool {
			if after && k == q.After {
				return true
			}
			if !strings.HasPrefix(k, q.Prefix) {
				return false
			}
			if len(res.KVs) == q.Limit {
				res.More = true
				return false
			}
			res.KVs = append(res.KVs, copyKV(*s.st.KVs[k]))
			return true
		})
		return res, nil
	case histQuery:
		res := histResult{ScannedTo: q.After, CompactedRev: s.st.CompactedRev}
		if q.After < s.st.CompactedRev {
			res.Compacted = true
			return res, nil
		}
		i := sort.Search(len(s.st.Hist), func(i int) bool { return s.st.Hist[i].Revision > q.After })
		for ; i < len(s.st.Hist); i++ {
			ev := s.st.Hist[i]
			if len(res.Events) == q.Limit {
				res.More = true
				break
			}
			res.ScannedTo = ev.Revision
			if strings.HasPrefix(ev.KV.Key, q.Prefix) {
				ev.KV = copyKV(ev.KV)
				res.Events = append(res.Events, ev)
			}
		}
		if !res.More && s.st.Rev > res.ScannedTo {
			res.ScannedTo = s.st.Rev
		}
		return res, nil
	case sessionDueQuery:
		res := sessionDueResult{Sessions: len(s.st.Sessions), Clock: s.st.LastTime}
		for _, ss := range s.st.Sessions {
			if ss.Deadline < q.Now {
				res.Due = true
				break
			}
		}
		return res, nil
	case statsQuery:
		return statsResult{
			Keys: len(s.st.KVs), Sessions: len(s.st.Sessions), HistEvents: len(s.st.Hist),
			Rev: s.st.Rev, CompactedRev: s.st.CompactedRev, Bytes: s.totalBytes, LastTime: time.Unix(0, s.st.LastTime),
		}, nil
	}
	return nil, fmt.Errorf("%w: unknown query type %T", ErrInvalidArgument, q)
}

func copyKV(kv KV) KV {
	if kv.Value != nil {
		kv.Value = bytes.Clone(kv.Value)
	}
	return kv
}

// SaveSnapshot writes the whole state as JSON.
func (s *stateMachine) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return json.NewEncoder(w).Encode(&s.st)
}

// RecoverFromSnapshot replaces the state with a snapshot's.
func (s *stateMachine) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	var st smState
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return fmt.Errorf("metadata: decode snapshot: %w", err)
	}
	if st.KVs == nil {
		st.KVs = map[string]*KV{}
	}
	if st.Sessions == nil {
		st.Sessions = map[uint64]*smSession{}
	}
	s.owners = map[string]int64{}
	for _, ss := range st.Sessions {
		if ss.Keys == nil {
			ss.Keys = map[string]struct{}{}
		}
		if ss.Owner != "" {
			s.owners[ss.Owner]++
		}
	}
	s.st = st
	s.keys = newKeyIndex()
	s.totalBytes = 0
	for k, kv := range st.KVs {
		s.keys.ReplaceOrInsert(k)
		s.totalBytes += int64(len(k) + len(kv.Value))
	}
	s.histBytes = 0
	for _, ev := range st.Hist {
		s.histBytes += eventSize(ev)
	}
	if s.notify != nil {
		s.notify.poke()
	}
	return nil
}

// Close releases nothing: the state is in memory.
func (s *stateMachine) Close() error { return nil }
