package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
)

// decodeJSON decodes one JSON object as jq would see it.
func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return m
}

// wantNumber fails unless m[key] is a JSON number equal to want.
func wantNumber(t *testing.T, m map[string]any, key string, want float64) {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok || v != want {
		t.Fatalf("%s = %#v (%T), want the JSON number %v", key, m[key], m[key], want)
	}
}

// TestProtoJSONNumbers: 64-bit fields print as numbers at every depth
// (nested messages, lists, maps), string fields holding digits stay
// strings, field order is protojson's, and the text form is indented.
func TestProtoJSONNumbers(t *testing.T) {
	st := &clientv1.TopicStats{
		Topic: "public/default/123", MsgsInTotal: 20, BytesInTotal: 1 << 40, Entries: 9007199254740993, // > 2^53
		MsgRateIn: 1.5,
		Subscriptions: []*clientv1.SubscriptionStats{{
			Name: "42", BacklogEntries: 7, MarkDeletePosition: &clientv1.MessageId{LedgerId: 12, EntryId: 3},
			Blocked: &clientv1.BlockedRead{SinceMs: 1700000000000, Attempts: 2},
		}},
	}
	b, err := protoJSON(st, "")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(b, '\n') {
		t.Fatalf("one-line form has a newline: %s", b)
	}
	if !strings.Contains(string(b), `"entries":9007199254740993`) {
		t.Fatalf("a value above 2^53 must be printed exactly: %s", b)
	}
	m := decodeJSON(t, b)
	wantNumber(t, m, "msgsInTotal", 20)
	wantNumber(t, m, "bytesInTotal", 1<<40)
	wantNumber(t, m, "msgRateIn", 1.5)
	if m["topic"] != "public/default/123" {
		t.Fatalf("topic = %#v", m["topic"])
	}
	sub := m["subscriptions"].([]any)[0].(map[string]any)
	if sub["name"] != "42" {
		t.Fatalf("a string field of digits must stay a string: %#v", sub["name"])
	}
	wantNumber(t, sub, "backlogEntries", 7)
	wantNumber(t, sub["markDeletePosition"].(map[string]any), "ledgerId", 12)
	wantNumber(t, sub["blocked"].(map[string]any), "sinceMs", 1700000000000)
	if strings.Index(string(b), `"topic"`) > strings.Index(string(b), `"msgsInTotal"`) {
		t.Fatalf("field order changed: %s", b)
	}

	// Maps and lists of 64-bit values (the cursor record of internal stats
	// and namespace policies' optional int64s).
	pol := &clientv1.NamespacePolicies{RetentionSizeBytes: -1, BacklogQuotaBytes: proto.Int64(10 << 30), MessageTtlSeconds: proto.Int64(3600),
		ReplicationRegions: []string{"1", "2"}}
	b, err = protoJSON(pol, "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\n  \"")) {
		t.Fatalf("text form not indented: %s", b)
	}
	m = decodeJSON(t, b)
	wantNumber(t, m, "retentionSizeBytes", -1)
	wantNumber(t, m, "backlogQuotaBytes", 10<<30)
	wantNumber(t, m, "messageTtlSeconds", 3600)
	if r := m["replicationRegions"].([]any); r[0] != "1" {
		t.Fatalf("replicationRegions = %#v, want strings", r)
	}
	ist := &clientv1.TopicInternalStats{Ledgers: []*clientv1.LedgerInfo{{LedgerId: 5, Entries: -1, SizeBytes: 100}},
		Cursors: []*clientv1.CursorInfo{{Name: "s", IndividuallyAcked: []string{"[1:2..1:3]"}, IndividuallyAckedCount: 2}}}
	b, err = protoJSON(ist, "")
	if err != nil {
		t.Fatal(err)
	}
	m = decodeJSON(t, b)
	wantNumber(t, m["ledgers"].([]any)[0].(map[string]any), "entries", -1)
	wantNumber(t, m["cursors"].([]any)[0].(map[string]any), "individuallyAckedCount", 2)
}
