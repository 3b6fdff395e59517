package metadata

import (
	"bytes"
	"encoding/json"
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
	if len(s.st.KVs) != 2 || s.st.KVs["p"] == nil {
		t.Fatalf("keys after expiry: %v", s.keys)
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
	if r.st.Rev != 7 || r.st.CompactedRev != 3 || len(r.st.Hist) != 4 || len(r.keys) != 1 || r.keys[0] != "d" {
		t.Fatalf("recovered: rev %d compacted %d hist %d keys %v", r.st.Rev, r.st.CompactedRev, len(r.st.Hist), r.keys)
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
