package broker_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
)

// TestPartitionedTopicBrokerAPI drives the broker's side of partitioned
// topics with raw RPCs (no Go client routing): the JSON admin route, the
// Meridian service's GetPartitions, the refusal of a lookup of the base
// name, raise-only updates, the errors' codes and texts, stats of a
// partition and of the base name.
func TestPartitionedTopicBrokerAPI(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 1})
	api, adm := conn(t, rc.Addrs()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "public/default/pt"

	// JSON over HTTP, like every admin RPC.
	resp, err := http.Post("http://"+rc.Broker(1).HTTPAddr()+"/admin/v1/CreatePartitionedTopic", "application/json",
		strings.NewReader(`{"topic":"`+topic+`","partitions":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"partitions":3`) {
		t.Fatalf("HTTP create: %s %s", resp.Status, body)
	}
	// Broker 0 learns it through the global shard.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := api.GetPartitions(ctx, &clientv1.GetPartitionsRequest{Topic: topic})
		if err == nil && r.GetPartitions() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetPartitions on broker 0: %v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := api.GetPartitions(ctx, &clientv1.GetPartitionsRequest{Topic: "public/default/plain"}); err != nil || r.GetPartitions() != 0 {
		t.Fatalf("GetPartitions of a plain topic: %v %v", r, err)
	}
	_, err = api.GetPartitions(ctx, &clientv1.GetPartitionsRequest{Topic: "bad"})
	wantCode(t, "GetPartitions bad name", err, codes.InvalidArgument, "tenant/namespace/topic")

	// The base name cannot be looked up (a plain topic would hide the
	// partitions' messages); a partition can.
	_, err = api.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
	wantCode(t, "lookup of the base name", err, codes.FailedPrecondition, "partitioned", "3 partitions")
	if _, err := api.Lookup(ctx, &clientv1.LookupRequest{Topic: topic + "-partition-2"}); err != nil {
		t.Fatalf("lookup of a partition: %v", err)
	}
	_, err = adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic})
	wantCode(t, "create the base name", err, codes.FailedPrecondition, "partitioned")

	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: topic, Partitions: 5})
	wantCode(t, "create twice", err, codes.AlreadyExists, "3 partitions")
	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "public/default/q", Partitions: 1025})
	wantCode(t, "too many partitions", err, codes.InvalidArgument, "partitions 1025", "1..1024")
	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "public/default/q-partition-0", Partitions: 2})
	wantCode(t, "a partition's name", err, codes.InvalidArgument, "names a partition")
	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "public/default/" + strings.Repeat("x", 120), Partitions: 10})
	wantCode(t, "too long with the suffix", err, codes.InvalidArgument, "too long for 10 partitions")
	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "public/nowhere/q", Partitions: 2})
	wantCode(t, "missing namespace", err, codes.NotFound, "public/nowhere")
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: "public/default/plain"}); err != nil {
		t.Fatal(err)
	}
	_, err = adm.CreatePartitionedTopic(ctx, &clientv1.CreatePartitionedTopicRequest{Topic: "public/default/plain", Partitions: 2})
	wantCode(t, "over a plain topic", err, codes.AlreadyExists, "non-partitioned")

	_, err = adm.UpdatePartitionedTopic(ctx, &clientv1.UpdatePartitionedTopicRequest{Topic: topic, Partitions: 2})
	wantCode(t, "lower", err, codes.InvalidArgument, "current count is 3")
	md, err := adm.UpdatePartitionedTopic(ctx, &clientv1.UpdatePartitionedTopicRequest{Topic: topic, Partitions: 5})
	if err != nil || md.GetPartitions() != 5 {
		t.Fatalf("raise: %v %v", md, err)
	}
	if md, err := adm.GetPartitionedTopicMetadata(ctx, &clientv1.GetPartitionedTopicMetadataRequest{Topic: topic}); err != nil || md.GetPartitions() != 5 || md.GetStale() {
		t.Fatalf("metadata: %v %v", md, err)
	}

	// Stats of the base name: partition 2 exists (looked up above), the
	// others not yet.
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic, PerPartition: true})
	if err != nil || st.GetPartitions() != 5 || st.GetMissingPartitions() != 4 || len(st.GetPartitionStats()) != 1 ||
		st.GetPartitionStats()[0].GetTopic() != topic+"-partition-2" {
		t.Fatalf("stats: %v %v", st, err)
	}
	ls, err := adm.ListPartitionedTopics(ctx, &clientv1.ListPartitionedTopicsRequest{Namespace: "public/default"})
	if err != nil || len(ls.GetTopics()) != 1 || ls.GetTopics()[0].GetTopic() != topic || ls.GetTopics()[0].GetPartitions() != 5 {
		t.Fatalf("list: %v %v", ls, err)
	}
	del, err := adm.DeletePartitionedTopic(ctx, &clientv1.DeletePartitionedTopicRequest{Topic: topic})
	if err != nil || del.GetDeletedPartitions() != 1 {
		t.Fatalf("delete: %v %v", del, err)
	}
	if r, err := api.GetPartitions(ctx, &clientv1.GetPartitionsRequest{Topic: topic}); err != nil || r.GetPartitions() != 0 {
		t.Fatalf("GetPartitions after delete: %v %v", r, err)
	}
	_, err = adm.DeletePartitionedTopic(ctx, &clientv1.DeletePartitionedTopicRequest{Topic: topic})
	wantCode(t, "delete twice", err, codes.NotFound, "not partitioned")
}
