package metadata

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

func apply(t *testing.T, s *stateMachine, c command) (uint64, cmdResult) {
	t.Helper()
	b, _ := json.Marshal(c)
	res, err := s.Update(sm.Entry{Cmd: b})
	if err != nil {
		t.Fatalf("Update returned an error: %v", err)
	}
	var out cmdResult
	if err := json.Unmarshal(res.Data, &out); err != nil {
		t.Fatal(err)
	}
	return res.Value, out
}

func put(key string, session uint64) cmdOp {
	return cmdOp{Type: OpPut, Key: key, Value: []byte(key), Session: session}
}

// TestStateMachineSessionTime drives expiry with explicit proposal times:
// the state machine never reads a clock. Only ticks (the leader's clock)
// move session time; other commands' times are bounded by it.
func TestStateMachineSessionTime(t *testing.T) {
	s := newStateMachine(1, 100, 1<<20, nil)
	sec := int64(time.Second)
	_, r := apply(t, s, command{Type: cmdCreateSess, Now: 10 * sec, TTL: 2 * sec})
	id := r.Session
	apply(t, s, command{Type: cmdTxn, Now: 10 * sec, Ops: []cmdOp{put("e/b", id), put("e/a", id), put("p", 0)}})
	// At the deadline the session still lives.
	if _, r := apply(t, s, command{Type: cmdTick, Now: 12 * sec, MaxSkew: sec}); r.Expired != 0 {
		t.Fatalf("expired at its deadline")
	}
	// A proposer whose clock runs 48 s ahead neither moves the session
	// clock nor extends a session by more than the skew bound.
	apply(t, s, command{Type: cmdTxn, Now: 100 * sec, Ops: []cmdOp{put("fast", 0)}})
	if code, _ := apply(t, s, command{Type: cmdKeepAlive, Now: 60 * sec, Session: id}); code != codeOK {
		t.Fatalf("keep-alive from a fast proposer: code %d", code)
	}
	if s.st.LastTime != 12*sec || s.st.Sessions[id].Deadline != 15*sec {
		t.Fatalf("after fast proposals: clock %v, deadline %v; want 12s, 15s", time.Duration(s.st.LastTime), time.Duration(s.st.Sessions[id].Deadline))
	}
	// A slow proposer does not shorten it either.
	apply(t, s, command{Type: cmdKeepAlive, Now: 1 * sec, Session: id})
	if d := s.st.Sessions[id].Deadline; d != 15*sec {
		t.Fatalf("after a slow keep-alive: deadline %v, want 15s", time.Duration(d))
	}
	if _, r := apply(t, s, command{Type: cmdTick, Now: 15 * sec}); r.Expired != 0 {
		t.Fatalf("expired at its deadline")
	}
	// A stale tick never moves the clock back.
	if _, r := apply(t, s, command{Type: cmdTick, Now: 1 * sec}); r.Expired != 0 || s.st.LastTime != 15*sec {
		t.Fatalf("stale tick: expired %d, clock %v", r.Expired, time.Duration(s.st.LastTime))
	}
	if _, r := apply(t, s, command{Type: cmdTick, Now: 16 * sec}); r.Expired != 1 {
		t.Fatalf("tick after deadline expired %d", r.Expired)
	}
	if code, _ := apply(t, s, command{Type: cmdKeepAlive, Now: 16 * sec, Session: id}); code != codeSessionExpired {
		t.Fatalf("keep-alive after expiry: code %d", code)
	}
	if len(s.st.KVs) != 2 || s.st.KVs["p"] == nil || s.keys.Len() != 2 {
		t.Fatalf("keys after expiry: %d, index %d", len(s.st.KVs), s.keys.Len())
	}
	// Deletes happen in key order with consecutive revisions.
	h := s.st.Hist[len(s.st.Hist)-2:]
	if h[0].KV.Key != "e/a" || h[1].KV.Key != "e/b" || h[1].Revision != h[0].Revision+1 || h[0].Type != EventDelete {
		t.Fatalf("expiry events: %+v", h)
	}
	// Renew on a new leader extends every session to now+TTL.
	_, r = apply(t, s, command{Type: cmdCreateSess, Now: 20 * sec, TTL: 2 * sec})
	if d := s.st.Sessions[r.Session].Deadline; d != 19*sec {
		t.Fatalf("session created by a fast proposer: deadline %v, want clock+skew+TTL = 19s", time.Duration(d))
	}
	apply(t, s, command{Type: cmdTick, Now: 30 * sec, Renew: true})
	if _, ok := s.st.Sessions[r.Session]; !ok || s.st.Sessions[r.Session].Deadline != 32*sec {
		t.Fatalf("renewed session: %+v", s.st.Sessions[r.Session])
	}
}

// TestStateMachineDeterministicSnapshot applies the same commands to two
// replicas, compares their snapshots byte for byte, and recovers a third.
func TestStateMachineDeterministicSnapshot(t *testing.T) {
	cmds := []command{
		{Type: cmdCreateSess, Now: 1, TTL: int64(time.Second)},
		{Type: cmdTxn, Now: 2, Ops: []cmdOp{put("a", 1), put("b", 0), put("c", 1)}},
		{Type: cmdTxn, Now: 3, Ops: []cmdOp{{Type: OpDelete, Key: "b", Expected: 1}}},
		{Type: cmdTxn, Now: 4, Ops: []cmdOp{{Type: OpPut, Key: "a", Expected: 9}}},
		{Type: cmdTick, Now: int64(5 * time.Second)},
		{Type: cmdTxn, Now: int64(6 * time.Second), Ops: []cmdOp{put("d", 0)}},
	}
	var snaps [2]bytes.Buffer
	for i := range snaps {
		s := newStateMachine(1, 4, 1<<20, nil)
		for _, c := range cmds {
			apply(t, s, c)
		}
		if err := s.SaveSnapshot(&snaps[i], nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(snaps[0].Bytes(), snaps[1].Bytes()) {
		t.Fatalf("replicas differ:\n%s\n%s", snaps[0].String(), snaps[1].String())
	}
	r := newStateMachine(1, 4, 1<<20, nil)
	if err := r.RecoverFromSnapshot(bytes.NewReader(snaps[0].Bytes()), nil, nil); err != nil {
		t.Fatal(err)
	}
	// b put, b deleted, a and c expired, d put: revisions 1..7; history of 4.
	if min, _ := r.keys.Min(); r.st.Rev != 7 || r.st.CompactedRev != 3 || len(r.st.Hist) != 4 || r.keys.Len() != 1 || min != "d" {
		t.Fatalf("recovered: rev %d compacted %d hist %d keys %d (first %q)", r.st.Rev, r.st.CompactedRev, len(r.st.Hist), r.keys.Len(), min)
	}
	v, _ := r.Lookup(histQuery{After: 2, Limit: 10})
	if !v.(histResult).Compacted {
		t.Fatal("history before the compacted revision was served")
	}
	v, _ = r.Lookup(histQuery{After: 3, Limit: 10})
	if hr := v.(histResult); hr.Compacted || len(hr.Events) != 4 || hr.ScannedTo != 7 {
		t.Fatalf("history after 3: %+v", hr)
	}
}

func TestStateMachineHistoryBytes(t *testing.T) {
	s := newStateMachine(1, 1000, 3000, nil)
	big := bytes.Repeat([]byte("x"), 1000)
	for i := range 10 {
		apply(t, s, command{Type: cmdTxn, Ops: []cmdOp{{Type: OpPut, Key: "k", Value: big}}})
		if s.histBytes > 3000 && len(s.st.Hist) > 1 {
			t.Fatalf("after %d puts history holds %d bytes", i+1, s.histBytes)
		}
	}
	if s.st.CompactedRev == 0 || len(s.st.Hist) == 0 {
		t.Fatalf("history not bounded: %d events, compacted %d", len(s.st.Hist), s.st.CompactedRev)
	}
}

// sumBytes recomputes the bytes of keys plus values from the state.
func sumBytes(s *stateMachine) int64 {
	var n int64
	for k, kv := range s.st.KVs {
		n += int64(len(k) + len(kv.Value))
	}
	return n
}

// TestStateMachineQuotaTotals: the running byte total and the sessions per
// owner follow puts, replaces, deletes and session expiry, are recomputed
// from a snapshot (they are not in it), and the limits the commands carry
// refuse alike before and after recovery. A snapshot without owners (older
// format) loads with no session counted.
func TestStateMachineQuotaTotals(t *testing.T) {
	s := newStateMachine(1, 100, 1<<20, nil)
	sec := int64(time.Second)
	_, r := apply(t, s, command{Type: cmdCreateSess, Now: sec, TTL: sec, Client: "ip:a", MaxSessions: 2})
	apply(t, s, command{Type: cmdCreateSess, Now: sec, TTL: 10 * sec, Client: "ip:a", MaxSessions: 2})
	apply(t, s, command{Type: cmdTxn, Now: sec, Ops: []cmdOp{put("e/1", r.Session), put("p/1", 0), put("p/2", 0)}})
	apply(t, s, command{Type: cmdTxn, Now: sec, Ops: []cmdOp{{Type: OpPut, Key: "p/1", Value: []byte("longer")}, {Type: OpDelete, Key: "p/2"}}})
	if code, res := apply(t, s, command{Type: cmdCreateSess, Now: sec, TTL: sec, Client: "ip:a", MaxSessions: 2}); code != codeLimitExceeded || s.st.NextSession != 3 {
		t.Fatalf("3rd session of ip:a: code %d %q, next session %d", code, res.Msg, s.st.NextSession)
	}
	apply(t, s, command{Type: cmdTick, Now: 3 * sec}) // expires session 1 and e/1
	if s.totalBytes != sumBytes(s) || s.totalBytes != int64(len("p/1")+len("longer")) || s.owners["ip:a"] != 1 {
		t.Fatalf("totals: bytes %d (recomputed %d), owners %v", s.totalBytes, sumBytes(s), s.owners)
	}
	var snap bytes.Buffer
	if err := s.SaveSnapshot(&snap, nil, nil); err != nil {
		t.Fatal(err)
	}
	r2 := newStateMachine(1, 100, 1<<20, nil)
	if err := r2.RecoverFromSnapshot(bytes.NewReader(snap.Bytes()), nil, nil); err != nil {
		t.Fatal(err)
	}
	if r2.totalBytes != s.totalBytes || r2.owners["ip:a"] != 1 {
		t.Fatalf("recovered totals: bytes %d, want %d; owners %v", r2.totalBytes, s.totalBytes, r2.owners)
	}
	for _, m := range []*stateMachine{s, r2} {
		if code, _ := apply(t, m, command{Type: cmdTxn, Now: 3 * sec, Ops: []cmdOp{put("q", 0)}, MaxBytes: s.totalBytes + 1}); code != codeLimitExceeded {
			t.Fatalf("2-byte put with 1 byte of room: code %d", code)
		}
		if code, _ := apply(t, m, command{Type: cmdTxn, Now: 3 * sec, Ops: []cmdOp{put("q", 0)}, MaxKeys: 1}); code != codeLimitExceeded {
			t.Fatalf("2nd key with max_keys 1: code %d", code)
		}
		apply(t, m, command{Type: cmdCreateSess, Now: 3 * sec, TTL: sec, Client: "ip:a", MaxSessions: 2})
		if code, _ := apply(t, m, command{Type: cmdCreateSess, Now: 3 * sec, TTL: sec, Client: "ip:a", MaxSessions: 2}); code != codeLimitExceeded {
			t.Fatalf("3rd session of ip:a: code %d", code)
		}
	}
	old := newStateMachine(1, 100, 1<<20, nil)
	oldSnap := `{"rev":1,"time":0,"nextSession":2,"kvs":{"k":{"Key":"k","Value":"dg==","Version":1,"CreateRevision":1,"ModRevision":1,"Session":0}},"sessions":{"1":{"ttl":1000,"deadline":5000,"keys":{}}},"hist":[],"compacted":0}`
	if err := old.RecoverFromSnapshot(bytes.NewReader([]byte(oldSnap)), nil, nil); err != nil {
		t.Fatal(err)
	}
	if old.totalBytes != 2 || len(old.owners) != 0 || len(old.st.Sessions) != 1 {
		t.Fatalf("old snapshot: bytes %d owners %v sessions %d", old.totalBytes, old.owners, len(old.st.Sessions))
	}
}

// TestStateMachineListMatchesModel: List over the key index returns what a
// scan of the sorted key set would, for prefixes and After keys present,
// absent, before and past the prefix, after puts and deletes.
func TestStateMachineListMatchesModel(t *testing.T) {
	s := newStateMachine(1, 100, 1<<20, nil)
	alphabet := []string{"a", "ab", "abc", "b", "ba", "bb", "c"}
	var all []string
	for _, x := range alphabet {
		for _, y := range alphabet {
			all = append(all, x+"/"+y)
		}
	}
	for i, k := range all {
		apply(t, s, command{Type: cmdTxn, Ops: []cmdOp{put(k, 0)}})
		if i%3 == 0 {
			apply(t, s, command{Type: cmdTxn, Ops: []cmdOp{{Type: OpDelete, Key: k}}})
		}
	}
	var live []string
	for k := range s.st.KVs {
		live = append(live, k)
	}
	slices.Sort(live)
	probes := append([]string{"", "a", "a/", "ab/", "b/b", "b/zz", "c/c", "z"}, all...)
	for _, prefix := range []string{"", "a", "a/", "ab", "b/", "b/b", "c/", "d"} {
		for _, after := range probes {
			for _, limit := range []int{1, 3, 1000} {
				var want []string
				more := false
				for _, k := range live {
					if !strings.HasPrefix(k, prefix) || (after != "" && k <= after) {
						continue
					}
					if len(want) == limit {
						more = true
						break
					}
					want = append(want, k)
				}
				v, _ := s.Lookup(listQuery{Prefix: prefix, After: after, Limit: limit})
				res := v.(ListResult)
				var got []string
				for _, kv := range res.KVs {
					got = append(got, kv.Key)
				}
				if !slices.Equal(got, want) || res.More != more {
					t.Fatalf("List(%q, after %q, limit %d) = %v more %v, want %v more %v", prefix, after, limit, got, res.More, want, more)
				}
			}
		}
	}
}
