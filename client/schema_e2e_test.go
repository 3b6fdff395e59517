package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/protobuf/proto"
)

// userV1 is the first version of a JSON-encoded record.
type userV1 struct {
	Name string `json:"name"`
	Age  int    `json:"age,omitempty"`
}

// userV2 adds an optional field: compatible under BACKWARD.
type userV2 struct {
	Name  string `json:"name"`
	Age   int    `json:"age,omitempty"`
	Email string `json:"email,omitempty"`
}

// userRequired adds a required field: not BACKWARD compatible.
type userRequired struct {
	Name  string `json:"name"`
	Age   int    `json:"age,omitempty"`
	Phone string `json:"phone"`
}

const (
	avroV1 = `{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}`
	avroV2 = `{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"email","type":["null","string"],"default":null}]}`
)

type avroUserV1 struct {
	Name string `avro:"name"`
	Age  int    `avro:"age"`
}

type avroUserV2 struct {
	Name  string  `avro:"name"`
	Age   int     `avro:"age"`
	Email *string `avro:"email"`
}

// TestTypedAvroEvolution: Avro binary needs the writer's schema: a v1
// consumer decodes v2 messages and a v2 consumer v1 messages by schema
// resolution, with the version each message carries.
func TestTypedAvroEvolution(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	topic := "public/default/avro-evolve"
	s1, err := client.AvroSchema[avroUserV1](avroV1)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := client.AvroSchema[avroUserV2](avroV2)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "v1", InitialPosition: client.Earliest}, s1)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s2)
	if err != nil {
		t.Fatalf("compatible Avro v2: %v", err)
	}
	c2, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "v2", InitialPosition: client.Earliest}, s2)
	if err != nil {
		t.Fatal(err)
	}
	email := "bob@example.com"
	if _, err := p1.Send(ctx, avroUserV1{"ann", 30}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, avroUserV2{"bob", 40, &email}, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []avroUserV1{{"ann", 30}, {"bob", 40}} {
		m, err := c1.Receive(ctx)
		if err != nil || m.Value != want || m.SchemaVersion != int32(i+1) {
			t.Fatalf("v1 consumer message %d: %+v %v", i, m, err)
		}
	}
	m, err := c2.Receive(ctx)
	if err != nil || m.Value.Name != "ann" || m.Value.Email != nil || m.SchemaVersion != 1 {
		t.Fatalf("v2 consumer, v1 message: %+v %v", m, err)
	}
	m, err = c2.Receive(ctx)
	if err != nil || m.Value.Name != "bob" || m.Value.Email == nil || *m.Value.Email != email {
		t.Fatalf("v2 consumer, v2 message: %+v %v", m, err)
	}
	// A required field without default is refused (BACKWARD), naming it.
	s3, _ := client.AvroSchema[avroUserV1](`{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"},{"name":"phone","type":"string"}]}`)
	if _, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s3); !errors.Is(err, client.ErrIncompatibleSchema) || !strings.Contains(err.Error(), `"phone"`) {
		t.Fatalf("Avro producer adding a required field: %v", err)
	}
}

// typedRoundTrip sends values with a typed producer and checks a typed
// consumer decodes the same values with the producer's schema version.
func typedRoundTrip[T any](t *testing.T, c *client.Client, topic string, schema client.Schema[T], values []T, equal func(a, b T) bool) {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	co, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest}, schema)
	if err != nil {
		t.Fatalf("%s: subscribe: %v", topic, err)
	}
	defer co.Close(ctx)
	p, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, schema)
	if err != nil {
		t.Fatalf("%s: producer: %v", topic, err)
	}
	defer p.Close(ctx)
	for i, v := range values {
		if _, err := p.Send(ctx, v, &client.Message{Key: fmt.Sprint(i)}); err != nil {
			t.Fatalf("%s: send %d: %v", topic, i, err)
		}
	}
	for i, want := range values {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("%s: receive %d: %v", topic, i, err)
		}
		if !equal(m.Value, want) || m.Key != fmt.Sprint(i) || m.SchemaVersion != p.SchemaVersion() {
			t.Fatalf("%s: message %d = %v (key %q, schema version %d), want %v (key %d, version %d)", topic, i, m.Value, m.Key, m.SchemaVersion, want, i, p.SchemaVersion())
		}
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTypedRoundTrip: each schema type round-trips through a typed
// producer and consumer, and the registry holds the schema.
func TestTypedRoundTrip(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)

	typedRoundTrip(t, c, "public/default/typed-string", client.StringSchema(), []string{"a", "héllo", ""}, func(a, b string) bool { return a == b })
	typedRoundTrip(t, c, "public/default/typed-bytes", client.BytesSchema(), [][]byte{{1, 2}, {0}, []byte("x")}, func(a, b []byte) bool { return string(a) == string(b) })
	js, err := client.JSONSchema[userV1]()
	if err != nil {
		t.Fatal(err)
	}
	typedRoundTrip(t, c, "public/default/typed-json", js, []userV1{{"ann", 30}, {"bob", 0}}, func(a, b userV1) bool { return a == b })
	ps, err := client.ProtoSchema[*clientv1.MessageId]()
	if err != nil {
		t.Fatal(err)
	}
	typedRoundTrip(t, c, "public/default/typed-proto", ps, []*clientv1.MessageId{{LedgerId: 7, EntryId: 9, BatchIndex: 2}, {}},
		func(a, b *clientv1.MessageId) bool { return proto.Equal(a, b) })

	as, err := client.AvroSchema[avroUserV1](avroV1)
	if err != nil {
		t.Fatal(err)
	}
	typedRoundTrip(t, c, "public/default/typed-avro", as, []avroUserV1{{"ann", 30}, {"", -1}}, func(a, b avroUserV1) bool { return a == b })

	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	for topic, typ := range map[string]clientv1.SchemaType{
		"public/default/typed-avro":   clientv1.SchemaType_SCHEMA_TYPE_AVRO,
		"public/default/typed-string": clientv1.SchemaType_SCHEMA_TYPE_STRING,
		"public/default/typed-json":   clientv1.SchemaType_SCHEMA_TYPE_JSON,
		"public/default/typed-proto":  clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF,
	} {
		vs, err := adm.ListSchemaVersions(ctx, topic)
		if err != nil || len(vs) != 1 || vs[0].GetType() != typ || vs[0].GetVersion() != 1 {
			t.Fatalf("%s: versions %v, %v; want one %v version", topic, vs, err, typ)
		}
	}
	if vs, err := adm.ListSchemaVersions(ctx, "public/default/typed-bytes"); err != nil || len(vs) != 0 {
		t.Fatalf("bytes topic: versions %v, %v; want none (BYTES is never registered)", vs, err)
	}
}

// TestTypedSchemaEvolution: a compatible new producer schema registers
// version 2 and old consumers decode it; an incompatible one (a required
// field added, a type change) is refused naming the field or the types;
// a message of another type reaching a typed consumer is ErrSchemaMismatch.
func TestTypedSchemaEvolution(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	topic := "public/default/evolve"
	s1, _ := client.JSONSchema[userV1]()
	s2, _ := client.JSONSchema[userV2]()
	sReq, _ := client.JSONSchema[userRequired]()

	old, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "old", InitialPosition: client.Earliest}, s1)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Send(ctx, userV1{"ann", 30}, nil); err != nil {
		t.Fatal(err)
	}
	p2, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s2)
	if err != nil {
		t.Fatalf("compatible v2 producer refused: %v", err)
	}
	if p1.SchemaVersion() != 1 || p2.SchemaVersion() != 2 {
		t.Fatalf("schema versions %d, %d; want 1, 2", p1.SchemaVersion(), p2.SchemaVersion())
	}
	if _, err := p2.Send(ctx, userV2{"bob", 40, "bob@example.com"}, nil); err != nil {
		t.Fatal(err)
	}

	// Incompatible producers are refused with a clear error.
	_, err = client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, sReq)
	t.Logf("incompatible producer: %v", err)
	if !errors.Is(err, client.ErrIncompatibleSchema) || !strings.Contains(err.Error(), `"phone"`) || !strings.Contains(err.Error(), "BACKWARD") {
		t.Fatalf("producer adding a required field: %v; want ErrIncompatibleSchema naming BACKWARD and \"phone\"", err)
	}
	_, err = client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, client.StringSchema())
	if !errors.Is(err, client.ErrIncompatibleSchema) || !strings.Contains(err.Error(), "JSON") || !strings.Contains(err.Error(), "STRING") {
		t.Fatalf("STRING producer on a JSON topic: %v; want ErrIncompatibleSchema naming both types", err)
	}
	_, err = client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "str"}, client.StringSchema())
	if !errors.Is(err, client.ErrIncompatibleSchema) {
		t.Fatalf("STRING consumer on a JSON topic: %v; want ErrIncompatibleSchema", err)
	}
	adm, _ := c.Admin()
	if vs, err := adm.ListSchemaVersions(ctx, topic); err != nil || len(vs) != 2 {
		t.Fatalf("refusals registered versions: %v, %v", vs, err)
	}

	// The v1 consumer decodes both versions; its raw view shows them.
	for i, want := range []userV1{{"ann", 30}, {"bob", 40}} {
		m, err := old.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Value != want || m.SchemaVersion != int32(i+1) {
			t.Fatalf("old consumer message %d: %+v version %d; want %+v version %d", i, m.Value, m.SchemaVersion, want, i+1)
		}
		_ = old.Ack(ctx, m.ID)
	}

	// Under NONE a STRING producer may register; a JSON consumer then
	// gets ErrSchemaMismatch naming the types, with the message.
	if err := adm.SetSchemaCompatibility(ctx, topic, false, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_NONE); err != nil {
		t.Fatal(err)
	}
	ps, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, client.StringSchema())
	if err != nil {
		t.Fatalf("STRING producer under NONE: %v", err)
	}
	if _, err := ps.Send(ctx, "not json", nil); err != nil {
		t.Fatal(err)
	}
	m, err := old.Receive(ctx)
	t.Logf("mismatched message: %v", err)
	if !errors.Is(err, client.ErrSchemaMismatch) || m == nil || !strings.Contains(err.Error(), "STRING") || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("JSON consumer on a STRING message: %v; want ErrSchemaMismatch naming STRING and version 3", err)
	}
	if err := old.Ack(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	_ = p1.Close(ctx)
	_ = p2.Close(ctx)
	_ = ps.Close(ctx)
	_ = old.Close(ctx)
}

// TestSchemaAdmin: upload, get, versions, compatibility settings,
// validation errors that change nothing, delete (tombstone and force).
func TestSchemaAdmin(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	adm, _ := c.Admin()
	topic := "public/default/admin-schema"
	s1, _ := client.JSONSchema[userV1]()
	sReq, _ := client.JSONSchema[userRequired]()

	if _, _, err := adm.UploadSchema(ctx, topic, &client.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte("{nope")}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "schema.definition") {
		t.Fatalf("bad definition: %v", err)
	}
	if _, _, err := adm.UploadSchema(ctx, topic, &client.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_PROTOBUF, Definition: []byte{}}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "schema.message_name") {
		t.Fatalf("protobuf without message name: %v", err)
	}
	if _, err := adm.TestSchemaCompatibility(ctx, topic, &client.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(`{"properties":{"name":{"type":"strin"}}}`)}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "$.name.type") {
		t.Fatalf("bad nested type: %v", err)
	}
	if vs, err := adm.ListSchemaVersions(ctx, topic); err != nil || len(vs) != 0 {
		t.Fatalf("refused uploads registered: %v %v", vs, err)
	}
	if v, existing, err := adm.UploadSchema(ctx, topic, s1.Info()); err != nil || v != 1 || existing {
		t.Fatalf("upload: %d %v %v", v, existing, err)
	}
	if v, existing, err := adm.UploadSchema(ctx, topic, s1.Info()); err != nil || v != 1 || !existing {
		t.Fatalf("upload again: %d %v %v; want version 1, existing", v, existing, err)
	}
	if r, err := adm.TestSchemaCompatibility(ctx, topic, sReq.Info()); err != nil || r.GetCompatible() || !strings.Contains(r.GetReason(), "phone") {
		t.Fatalf("test compatibility: %v %v", r, err)
	}
	if _, _, err := adm.UploadSchema(ctx, topic, sReq.Info()); !errors.Is(err, client.ErrIncompatibleSchema) {
		t.Fatalf("incompatible upload: %v", err)
	}
	// FORWARD at the namespace accepts the required field (old readers
	// ignore it); the topic's own mode overrides the namespace's.
	if err := adm.SetSchemaCompatibility(ctx, "public/default", true, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD); err != nil {
		t.Fatal(err)
	}
	if m, src, err := adm.GetSchemaCompatibility(ctx, topic, false); err != nil || m != clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD || src != "namespace" {
		t.Fatalf("effective mode %v from %q (%v); want FORWARD from namespace", m, src, err)
	}
	if err := adm.SetSchemaCompatibility(ctx, topic, false, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FULL); err != nil {
		t.Fatal(err)
	}
	if _, _, err := adm.UploadSchema(ctx, topic, sReq.Info()); !errors.Is(err, client.ErrIncompatibleSchema) || !strings.Contains(err.Error(), "FULL") {
		t.Fatalf("upload under topic FULL: %v", err)
	}
	if err := adm.SetSchemaCompatibility(ctx, topic, false, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_UNSPECIFIED); err != nil {
		t.Fatal(err)
	}
	if v, _, err := adm.UploadSchema(ctx, topic, sReq.Info()); err != nil || v != 2 {
		t.Fatalf("upload under namespace FORWARD: %d %v", v, err)
	}
	if err := adm.SetSchemaCompatibility(ctx, "public/default", true, clientv1.SchemaCompatibility(99)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("bad mode: %v", err)
	}
	if m, _, _ := adm.GetSchemaCompatibility(ctx, "public/default", true); m != clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_FORWARD {
		t.Fatalf("bad mode changed the namespace: %v", m)
	}
	latest, err := adm.GetSchema(ctx, topic, 0)
	if err != nil || latest.GetVersion() != 2 {
		t.Fatalf("latest: %v %v", latest, err)
	}
	// Delete: a tombstone (version 3); the latest is gone, version 1 stays.
	if v, err := adm.DeleteSchema(ctx, topic, false); err != nil || v != 3 {
		t.Fatalf("delete: %d %v", v, err)
	}
	if _, err := adm.GetSchema(ctx, topic, 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("latest after delete: %v", err)
	}
	if s, err := adm.GetSchema(ctx, topic, 1); err != nil || s.GetVersion() != 1 {
		t.Fatalf("version 1 after delete: %v %v", s, err)
	}
	// After a deletion any schema may start again, numbering goes on.
	if v, _, err := adm.UploadSchema(ctx, topic, client.StringSchema().Info()); err != nil || v != 4 {
		t.Fatalf("upload after delete: %d %v", v, err)
	}
	if _, err := adm.DeleteSchema(ctx, topic, true); err != nil {
		t.Fatal(err)
	}
	if vs, err := adm.ListSchemaVersions(ctx, topic); err != nil || len(vs) != 0 {
		t.Fatalf("after force delete: %v %v", vs, err)
	}
}

// TestTypedReplicated: the registry is global and entries carry their
// schema version, so a typed consumer in region b decodes what a typed
// producer wrote in region a, and a v1 consumer in a decodes v2 messages
// produced in b (fetching version 2 from the registry).
func TestTypedReplicated(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Bookies: 1})
	ctx := tctx(t, 120*time.Second)
	ca, cb := newClient(t, m.Region("a").Addrs()[0]), newClient(t, m.Region("b").Addrs()[0])
	adm, _ := ca.Admin()
	if err := adm.CreateNamespace(ctx, "public/geo", &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1,
		ReplicationRegions: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/geo/typed"
	s1, _ := client.JSONSchema[userV1]()
	s2, _ := client.JSONSchema[userV2]()
	inB, err := client.SubscribeTyped(ctx, cb, client.ConsumerOptions{Topic: topic, Subscription: "b", InitialPosition: client.Earliest}, s1)
	if err != nil {
		t.Fatal(err)
	}
	inA, err := client.SubscribeTyped(ctx, ca, client.ConsumerOptions{Topic: topic, Subscription: "a", InitialPosition: client.Earliest}, s1)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := client.NewTypedProducer(ctx, ca, client.ProducerOptions{Topic: topic}, s1)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := client.NewTypedProducer(ctx, cb, client.ProducerOptions{Topic: topic}, s2)
	if err != nil {
		t.Fatalf("v2 producer in b: %v", err)
	}
	if pa.SchemaVersion() != 1 || pb.SchemaVersion() != 2 {
		t.Fatalf("versions %d %d; want 1 2 (one global registry)", pa.SchemaVersion(), pb.SchemaVersion())
	}
	const n = 5
	for i := range n {
		if _, err := pa.Send(ctx, userV1{fmt.Sprintf("a%d", i), i}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := pb.Send(ctx, userV2{fmt.Sprintf("b%d", i), i, "x@y"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for name, co := range map[string]*client.TypedConsumer[userV1]{"a": inA, "b": inB} {
		got := map[string]int32{}
		for len(got) < 2*n {
			msg, err := co.Receive(ctx)
			if err != nil {
				t.Fatalf("consumer in %s after %d: %v", name, len(got), err)
			}
			if _, dup := got[msg.Value.Name]; dup {
				t.Logf("consumer in %s: duplicate %s", name, msg.Value.Name)
			}
			got[msg.Value.Name] = msg.SchemaVersion
			_ = co.Ack(ctx, msg.ID)
		}
		for i := range n {
			if got[fmt.Sprintf("a%d", i)] != 1 || got[fmt.Sprintf("b%d", i)] != 2 {
				t.Fatalf("consumer in %s: versions %v; want a* at 1, b* at 2", name, got)
			}
		}
	}
	admB, _ := cb.Admin()
	if vs, err := admB.ListSchemaVersions(ctx, topic); err != nil || len(vs) != 2 {
		t.Fatalf("registry seen from b: %v %v", vs, err)
	}
}
