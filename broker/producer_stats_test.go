package broker_test

import (
	"context"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// A producer with a failover identity is deduplicated by its own stream
// (ident_dedup.go); topic stats report that stream's last sequence, not
// what its name alone (shared with other instances) holds.
func TestProducerStatsLastSequenceWithIdentity(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "public/default/pstats-ident"
	st, err := cli.Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &clientv1.OpenProducer{Topic: topic, ProducerName: "shared", FailoverIdentity: "inst-1"}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("open producer: %v", err)
	}
	p := &testProducer{t: t, st: st}
	for i := range int64(7) {
		p.sendOK(i)
	}
	stats, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.GetProducers()) != 1 {
		t.Fatalf("producers %v, want one", stats.GetProducers())
	}
	if got := stats.GetProducers()[0].GetLastSequenceId(); got != 6 {
		t.Fatalf("last sequence in stats %d, want 6", got)
	}
}
