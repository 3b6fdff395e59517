package broker

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Fuzz targets for the JSON records the broker reads back from the
// metadata store: cursors, namespace policies, tenants, partitioned
// topics, topic and prefix policy records, regions (issue 22 item 6). A
// record is written by a broker, but the store is shared, survives
// upgrades and can be edited by hand (PutMetadataKey): its bytes are
// outside input. Seeds live in testdata/fuzz/<target>/.

// fuzzMaxAcks is the max_individual_acks FuzzDecodeCursorRecord decodes
// with.
const fuzzMaxAcks = 1000

// allocBound fails t when fn allocates more than perByte per input byte
// plus 1 MiB.
func allocBound(t *testing.T, what string, n, perByte int, fn func()) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(perByte*n+1<<20); got > bound {
		t.Fatalf("%s of %d bytes allocated %d, bound %d", what, n, got, bound)
	}
}

// FuzzDecodeCursorRecord decodes arbitrary bytes as a stored cursor, as a
// topic load does. Properties: no panic; decodeCursor and decodeCursorExt
// agree on whether the record is corrupt; at most max_individual_acks
// positions are kept, and decoding allocates in proportion to the record
// (the old decoder kept up to 2^20 positions per range, whatever their
// number); the cover vector and batch acks convert without panic; the
// record re-encodes to one that decodes to the same cursor, and encoding
// that again gives the same bytes.
func FuzzDecodeCursorRecord(f *testing.F) {
	acked := map[pos]struct{}{{5, 3}: {}, {5, 4}: {}, {5, 9}: {}, {7, 0}: {}}
	vf := [2]int64{5, 2}
	f.Add(encodeCursor(pos{5, 1}, acked, 42, 100))
	f.Add(encodeCursorExt(pos{5, 1}, nil, 42, 100, cursorExt{Replicated: true, ResetEpoch: 3, ResetRegion: "b", VFront: &vf, Type: 2,
		Cover:     map[string]coverOrigin{"a": {MD: 4, Ranges: [][2]int64{{9, 9}, {6, 7}}, Batch: map[int64][]uint64{5: {3}}}, "b@2": {MD: -1}},
		BatchAcks: []batchAckRecord{{L: 5, E: 2, Words: []uint64{5, 0}}}}))
	f.Add([]byte(`{"md":[1,0],"acked":[[2,0,99999999],[3,0,99999999]]}`))
	f.Add([]byte(`{"md":[1,0],"acked":[[2,9223372036854775806,9223372036854775807],[2,5,1]]}`))
	f.Add([]byte(`{"md":[-1,-1],"created_ms":-5,"cover":{"a":{"md":9223372036854775807,"r":[[5,1],[1,9223372036854775807]],"b":{"-3":[18446744073709551615]}}}}`))
	f.Add([]byte(`{"md":[1],"acked":[[1,2]],"batch_acks":[{"l":1,"e":2,"w":[]}],"vfront":null}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var md pos
		var got map[pos]struct{}
		var created int64
		var err error
		allocBound(t, "decodeCursor", len(data), 256, func() { md, got, created, err = decodeCursor(data, fuzzMaxAcks) })
		ext, extErr := decodeCursorExt(data)
		if (err == nil) != (extErr == nil) {
			t.Fatalf("decodeCursor: %v; decodeCursorExt: %v", err, extErr)
		}
		if err != nil {
			return
		}
		if len(got) > fuzzMaxAcks {
			t.Fatalf("kept %d acknowledged positions, max_individual_acks %d", len(got), fuzzMaxAcks)
		}
		allocBound(t, "vectorFromRecord", len(data), 256, func() { _ = vectorFromRecord(ext.Cover, fuzzVecLimits) })
		_ = formatBatchAcks(ext.BatchAcks)
		b1 := encodeCursorExt(md, got, created, fuzzMaxAcks, ext)
		md2, got2, created2, err := decodeCursor(b1, fuzzMaxAcks)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, b1)
		}
		if md2 != md || created2 != created || len(got2) != len(got) {
			t.Fatalf("re-encoded record decodes to md %v created %d %d acks, was %v %d %d", md2, created2, len(got2), md, created, len(got))
		}
		for p := range got {
			if _, ok := got2[p]; !ok {
				t.Fatalf("re-encoded record lost acknowledged %v", p)
			}
		}
		ext2, err := decodeCursorExt(b1)
		if err != nil {
			t.Fatal(err)
		}
		if b2 := encodeCursorExt(md2, got2, created2, fuzzMaxAcks, ext2); !bytes.Equal(b1, b2) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", b1, b2)
		}
	})
}

// stableJSON checks that v (decoded from a record) re-encodes to bytes
// that decode to a value encoding to the same bytes.
func stableJSON[T any](t *testing.T, what string, v T, decode func([]byte) (T, error)) {
	t.Helper()
	b1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: decoded record does not re-encode: %v", what, err)
	}
	v2, err := decode(b1)
	if err != nil {
		t.Fatalf("%s: re-encoded record does not decode: %v\n%s", what, err, b1)
	}
	b2, err := json.Marshal(v2)
	if err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("%s: re-encoding is not stable (%v):\n%s\n%s", what, err, b1, b2)
	}
}

// FuzzDecodePolicyRecords decodes arbitrary bytes with each decoder of a
// global-shard record the broker reads through the policy cache: namespace
// policies (protojson), tenant, partitioned topic, topic/prefix policy
// record (and the policies it embeds), region. Properties: no panic;
// every decoder either errors or returns a record that re-encodes stably;
// namespace policies survive a protojson round trip.
func FuzzDecodePolicyRecords(f *testing.F) {
	pol, _ := protojson.Marshal(&clientv1.NamespacePolicies{RetentionTimeSeconds: 60, AckQuorum: 2, ReplicationRegions: []string{"a", "b"}})
	f.Add(pol)
	f.Add([]byte(`{"allowed_regions":["a","b"],"admin_roles":["ops"]}`))
	f.Add([]byte(`{"partitions":4}`))
	f.Add([]byte(`{"partitions":4294967296}`))
	f.Add([]byte(`{"replication_regions":[],"policies":{"retentionTimeSeconds":"60"},"fields":["retention_time_seconds"],"permissions":{"r":["produce"]}}`))
	f.Add([]byte(`{"policies":{"ackQuorum":"x"}}`))
	f.Add([]byte(`{"policies":null,"replication_regions":null}`))
	f.Add([]byte(`{"name":"a","brokers":{"b1":{"grpc":"127.0.0.1:1","http":"127.0.0.1:2","updated_ms":5,"wan":"x"},"b2":{"grpc":"h:3","updated_ms":-1}}}`))
	f.Add([]byte(`{"name":"a","brokers":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := parsePolicies("t/ns", data); err == nil {
			b, err := protojson.Marshal(p)
			if err != nil {
				t.Fatalf("policies do not re-encode: %v", err)
			}
			p2, err := parsePolicies("t/ns", b)
			if err != nil || !proto.Equal(p, p2) {
				t.Fatalf("policies round trip: %v\n%s", err, b)
			}
		}
		if rec, err := parseTenant("t", data); err == nil {
			stableJSON(t, "tenant", rec, func(b []byte) (tenantRecord, error) { return parseTenant("t", b) })
		}
		if n, err := parsePartitioned(TopicName{}, data); err == nil {
			b, _ := json.Marshal(partitionedRecord{Partitions: n})
			if n2, err := parsePartitioned(TopicName{}, b); err != nil || n2 != n {
				t.Fatalf("partitioned round trip: %d -> %d, %v", n, n2, err)
			}
			_ = checkPartitions(n)
		}
		if rec, err := decodeTopicPolicyRecord(data); err == nil {
			if p, err := rec.policies(); err == nil {
				if err := rec.setPolicies(p, rec.Fields); err != nil {
					t.Fatalf("the record's own policies do not merge back: %v", err)
				}
			}
			stableJSON(t, "policy record", rec, decodeTopicPolicyRecord)
		}
		if rec, err := parseRegionRecord("a", data); err == nil {
			_ = rec.Endpoints()
			stableJSON(t, "region", rec, func(b []byte) (RegionRecord, error) { return parseRegionRecord("a", b) })
		}
	})
}
