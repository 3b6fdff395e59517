package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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

// fill64 sets every 64-bit integer field of m (recursively, lists and maps
// with one element, down to depth 4) to v, and a string field to "1".
func fill64(m protoreflect.Message, v int64, depth int) {
	if depth > 4 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue // one member of a oneof
		}
		scalar := func(k protoreflect.Kind) (protoreflect.Value, bool) {
			switch k {
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				return protoreflect.ValueOfInt64(v), true
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				return protoreflect.ValueOfUint64(uint64(v)), true
			case protoreflect.StringKind:
				return protoreflect.ValueOfString("1"), true
			}
			return protoreflect.Value{}, false
		}
		switch {
		case fd.IsMap():
			mv := m.Mutable(fd).Map()
			key := protoreflect.ValueOfString("k").MapKey()
			if fd.MapKey().Kind() != protoreflect.StringKind {
				continue
			}
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				e := mv.NewValue()
				fill64(e.Message(), v, depth+1)
				mv.Set(key, e)
			} else if sv, ok := scalar(fd.MapValue().Kind()); ok {
				mv.Set(key, sv)
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				e := l.NewElement()
				fill64(e.Message(), v, depth+1)
				l.Append(e)
			} else if sv, ok := scalar(fd.Kind()); ok {
				l.Append(sv)
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill64(m.Mutable(fd).Message(), v, depth+1)
		default:
			if sv, ok := scalar(fd.Kind()); ok {
				m.Set(fd, sv)
			}
		}
	}
}

// TestProtoJSONEveryAdminMessage: every message of the admin and client
// protocols that an admin command may print, with every 64-bit field set
// to 2^53+1, prints it as that exact JSON number and never as a string.
func TestProtoJSONEveryAdminMessage(t *testing.T) {
	const v = int64(1)<<53 + 1
	files := []protoreflect.FileDescriptor{clientv1.File_api_client_v1_admin_proto, clientv1.File_api_client_v1_client_proto}
	n := 0
	for _, fd := range files {
		msgs := fd.Messages()
		for i := range msgs.Len() {
			md := msgs.Get(i)
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err != nil {
				t.Fatal(err)
			}
			m := mt.New()
			fill64(m, v, 0)
			b, err := protoJSON(m.Interface(), "")
			if err != nil {
				t.Fatalf("%s: %v", md.FullName(), err)
			}
			if strings.Contains(string(b), `"9007199254740993"`) {
				t.Errorf("%s: a 64-bit value printed as a string: %s", md.FullName(), b)
			}
			var obj map[string]any
			if err := json.Unmarshal(b, &obj); err != nil {
				t.Errorf("%s: not JSON: %v: %s", md.FullName(), err, b)
			}
			if strings.Contains(string(b), "9007199254740993") {
				n++
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d messages carried a 64-bit value: the walk is broken", n)
	}
	t.Logf("%d messages with 64-bit fields print them as JSON numbers", n)
}
