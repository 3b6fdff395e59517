package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// TestAdminMetadataAndLedgers: the read-only metadata and ledger views of
// the admin API, over gRPC and HTTP, including a ledger with two segments.
func TestAdminMetadataAndLedgers(t *testing.T) {
	_, adm, rc := oneBroker(t, nil)
	ctx := context.Background()

	st, err := adm.GetMetadataStatus(ctx, &clientv1.GetMetadataStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetNodes()) != 1 || len(st.GetNodes()[0].GetShards()) != 2 {
		t.Fatalf("metadata status: %v", st)
	}
	for _, s := range st.GetNodes()[0].GetShards() {
		if s.GetLeaderId() != 1 || !s.GetIsLeader() || s.GetTerm() == 0 || s.GetLeaderAddress() == "" {
			t.Fatalf("shard %s: %v", s.GetName(), s)
		}
	}

	// A closed ledger whose ensemble changed at entry 10.
	b := func(id string) topology.BookieInfo {
		return topology.BookieInfo{ID: id, Address: "127.0.0.1:1", Rack: "r1"}
	}
	md := ledger.Metadata{ID: 424242, State: ledger.StateClosed, Ensemble: 2, WriteQuorum: 2, AckQuorum: 1,
		Segments:  []ledger.Segment{{FirstEntry: 0, Ensemble: []topology.BookieInfo{b("b1"), b("b2")}}, {FirstEntry: 10, Ensemble: []topology.BookieInfo{b("b1"), b("b3")}}},
		LastEntry: 19, Length: 2000, CreatedUnixMs: 1}
	val, _ := json.Marshal(md)
	if _, err := rc.Regional.Put(ctx, ledger.LedgerKey(md.ID), val, metadata.MustNotExist, 0); err != nil {
		t.Fatal(err)
	}
	d, err := adm.GetLedger(ctx, &clientv1.GetLedgerRequest{LedgerId: md.ID})
	if err != nil {
		t.Fatal(err)
	}
	segs := d.GetSegments()
	if d.GetState() != "closed" || d.GetLastEntry() != 19 || d.GetLength() != 2000 || len(segs) != 2 ||
		segs[0].GetLastEntry() != 9 || segs[1].GetFirstEntry() != 10 || segs[1].GetLastEntry() != 19 ||
		segs[1].GetEnsemble()[1].GetBookieId() != "b3" || d.GetWriteQuorum() != 2 || d.GetAckQuorum() != 1 {
		t.Fatalf("ledger: %v", d)
	}

	kv, err := adm.GetMetadataKey(ctx, &clientv1.GetMetadataKeyRequest{Key: ledger.LedgerKey(md.ID)})
	if err != nil || string(kv.GetValue()) != string(val) || kv.GetVersion() != 1 {
		t.Fatalf("get key: %v %v", kv, err)
	}
	if _, err := adm.GetMetadataKey(ctx, &clientv1.GetMetadataKeyRequest{Key: "tenants/public", Shard: clientv1.MetadataShard_METADATA_SHARD_GLOBAL}); err != nil {
		t.Fatalf("get global key: %v", err)
	}
	if _, err := adm.GetMetadataKey(ctx, &clientv1.GetMetadataKeyRequest{Key: "tenants/public"}); !errors.Is(broker.FromGRPC(err), broker.ErrNotFound) {
		t.Fatalf("global key in the regional shard: %v", err)
	}
	ls, err := adm.ListMetadataKeys(ctx, &clientv1.ListMetadataKeysRequest{Limit: 1})
	if err != nil || len(ls.GetKvs()) != 1 || !ls.GetMore() {
		t.Fatalf("list all keys, limit 1: %v %v", ls, err)
	}
	ls2, err := adm.ListMetadataKeys(ctx, &clientv1.ListMetadataKeysRequest{Limit: 1, After: ls.GetKvs()[0].GetKey()})
	if err != nil || len(ls2.GetKvs()) != 1 || ls2.GetKvs()[0].GetKey() <= ls.GetKvs()[0].GetKey() {
		t.Fatalf("next page: %v %v", ls2, err)
	}
	for _, bad := range []*clientv1.ListMetadataKeysRequest{{Limit: -1}, {Limit: 1001}, {Prefix: strings.Repeat("p", 1025)}, {Shard: 7}} {
		if _, err := adm.ListMetadataKeys(ctx, bad); !errors.Is(broker.FromGRPC(err), broker.ErrInvalidArgument) {
			t.Fatalf("list %v: %v", bad, err)
		}
	}
	if _, err := adm.GetLedger(ctx, &clientv1.GetLedgerRequest{LedgerId: -1}); !errors.Is(broker.FromGRPC(err), broker.ErrInvalidArgument) {
		t.Fatalf("negative ledger: %v", err)
	}

	// Over HTTP too.
	base := "http://" + rc.Broker(0).HTTPAddr() + "/admin/v1/"
	for _, c := range []struct {
		method, body string
		code         int
		want         string
	}{
		{"GetMetadataStatus", ``, 200, `"isLeader":true`},
		{"GetLedger", `{"ledgerId":"424242"}`, 200, `"firstEntry":"10"`},
		{"GetLedger", `{"ledgerId":"1"}`, 404, `ERROR_CODE_NOT_FOUND`},
		{"GetMetadataKey", `{"key":"` + ledger.LedgerKey(md.ID) + `"}`, 200, `"version":"1"`},
		{"ListMetadataKeys", `{"prefix":"ledgers/"}`, 200, ledger.LedgerKey(md.ID)},
		{"ListTopicLedgers", `{"topic":"public/default/none"}`, 404, `ERROR_CODE_NOT_FOUND`},
	} {
		resp, err := http.Post(base+c.method, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(body), c.want) {
			t.Fatalf("POST %s %s: %d %s (want %d with %s)", c.method, c.body, resp.StatusCode, body, c.code, c.want)
		}
	}
}
