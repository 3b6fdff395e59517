package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

func jsonSchemaInfo(def string) *clientv1.SchemaInfo {
	return &clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_JSON, Definition: []byte(def)}
}

// openSchemaProducer opens a raw producer stream with a schema and returns
// the opened answer or the error that ended the open.
func openSchemaProducer(ctx context.Context, cli clientv1.MeridianClient, topic string, si *clientv1.SchemaInfo) (*clientv1.ProducerOpened, error) {
	st, err := cli.Produce(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, Schema: si}}}); err != nil {
		return nil, err
	}
	r, err := st.Recv()
	if err != nil {
		return nil, err
	}
	return r.GetOpened(), nil
}

// TestSchemaRegistryConcurrentVersions: uploads racing from many callers
// get distinct versions 1..n (registration is a create-if-absent of the
// next number).
func TestSchemaRegistryConcurrentVersions(t *testing.T) {
	_, adm, _ := oneBroker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, n = "public/default/race", 8
	var wg sync.WaitGroup
	versions := make([]int32, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := adm.UploadSchema(ctx, &clientv1.UploadSchemaRequest{Topic: topic,
				Schema: jsonSchemaInfo(fmt.Sprintf(`{"type":"object","properties":{"f%d":{"type":"string"}}}`, i))})
			versions[i], errs[i] = r.GetVersion(), err
		}()
	}
	wg.Wait()
	seen := map[int32]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("upload %d: %v", i, errs[i])
		}
		if seen[versions[i]] || versions[i] < 1 || versions[i] > n {
			t.Fatalf("versions %v: want distinct 1..%d", versions, n)
		}
		seen[versions[i]] = true
	}
	r, err := adm.ListSchemaVersions(ctx, &clientv1.ListSchemaVersionsRequest{Topic: topic})
	if err != nil || len(r.GetVersions()) != n {
		t.Fatalf("list: %v %v", r, err)
	}
}

// TestSchemaRegistryKeysAndPolicies: a deeper topic's registry keys are not
// listed as versions of its parent; schema_auto_update=false refuses an
// unregistered producer schema naming the policy and accepts it once
// uploaded; a bad schema_compatibility is refused and changes nothing.
func TestSchemaRegistryKeysAndPolicies(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "public/default/parent"
	v1 := jsonSchemaInfo(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	if _, err := adm.UploadSchema(ctx, &clientv1.UploadSchemaRequest{Topic: topic, Schema: v1}); err != nil {
		t.Fatal(err)
	}
	deeper, _ := protojson.Marshal(&clientv1.SchemaInfo{Type: clientv1.SchemaType_SCHEMA_TYPE_STRING, Version: 1})
	if _, err := rc.Global.Put(ctx, "schemas/"+topic+"/child/00000000000000000001", deeper, metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}
	r, err := adm.ListSchemaVersions(ctx, &clientv1.ListSchemaVersionsRequest{Topic: topic})
	if err != nil || len(r.GetVersions()) != 1 || r.GetVersions()[0].GetType() != clientv1.SchemaType_SCHEMA_TYPE_JSON {
		t.Fatalf("versions of %s: %v %v; want only its own JSON version", topic, r, err)
	}
	// The partitions of a partitioned topic share its registry.
	if o, err := openSchemaProducer(ctx, cli, topic+"-partition-3", v1); err != nil || o.GetSchemaVersion() != 1 {
		t.Fatalf("producer on a partition: %v %v; want the partitioned topic's version 1", o, err)
	}
	if g, err := adm.GetSchema(ctx, &clientv1.GetSchemaRequest{Topic: topic + "-partition-0"}); err != nil || g.GetSchema().GetVersion() != 1 {
		t.Fatalf("schema of a partition: %v %v", g, err)
	}

	pr, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "public/default"})
	if err != nil {
		t.Fatal(err)
	}
	pol := pr.GetPolicies()
	bad := protoClonePolicies(pol)
	bad.SchemaCompatibility = clientv1.SchemaCompatibility(42)
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/default", Policies: bad}); code(err) != clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(err.Error(), "schema_compatibility") {
		t.Fatalf("bad schema_compatibility: %v", err)
	}
	off := false
	pol.SchemaAutoUpdate = &off
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/default", Policies: pol}); err != nil {
		t.Fatal(err)
	}
	v2 := jsonSchemaInfo(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`)
	// The policy reaches the loaded topic through the policy cache: poll.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = openSchemaProducer(ctx, cli, topic, v2)
		if code(err) == clientv1.ErrorCode_ERROR_CODE_NOT_ALLOWED && strings.Contains(err.Error(), "schema_auto_update") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unregistered producer schema with auto-update off: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if o, err := openSchemaProducer(ctx, cli, topic, v1); err != nil || o.GetSchemaVersion() != 1 {
		t.Fatalf("registered schema with auto-update off: %v %v", o, err)
	}
	if u, err := adm.UploadSchema(ctx, &clientv1.UploadSchemaRequest{Topic: topic, Schema: v2}); err != nil || u.GetVersion() != 2 {
		t.Fatalf("upload v2: %v %v", u, err)
	}
	if o, err := openSchemaProducer(ctx, cli, topic, v2); err != nil || o.GetSchemaVersion() != 2 {
		t.Fatalf("uploaded schema with auto-update off: %v %v", o, err)
	}
}

func protoClonePolicies(p *clientv1.NamespacePolicies) *clientv1.NamespacePolicies {
	b, _ := protojson.Marshal(p)
	out := &clientv1.NamespacePolicies{}
	_ = protojson.Unmarshal(b, out)
	return out
}
