package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// registerRegion writes a region record into the global shard, as the
// brokers of that region do when they start.
func registerRegion(t *testing.T, global metadata.Store, name string, grpcAddrs ...string) {
	t.Helper()
	rec := broker.RegionRecord{Name: name, Brokers: map[string]broker.RegionBroker{}}
	for i, a := range grpcAddrs {
		rec.Brokers[name+"-broker-"+string(rune('0'+i))] = broker.RegionBroker{GRPC: a, UpdatedMs: time.Now().UnixMilli()}
	}
	val, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := global.Put(ctx, "regions/"+name, val, metadata.AnyVersion, 0); err != nil {
		t.Fatalf("register region %s: %v", name, err)
	}
}

// wantCode fails t unless err has code c and its message contains every one of parts.
func wantCode(t *testing.T, what string, err error, c codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: got %v, want %v", what, err, c)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Fatalf("%s: error %q does not name %q", what, status.Convert(err).Message(), p)
		}
	}
}

func TestReplicationPolicyAdmin(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	_, adm := conn(t, rc.Addrs()[0])
	ctx := context.Background()
	registerRegion(t, rc.Global, "b", "127.0.0.1:1")
	registerRegion(t, rc.Global, "c", "127.0.0.1:1")
	if _, err := adm.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: "acme", AllowedRegions: []string{regiontest.Region, "b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "acme/geo"}); err != nil {
		t.Fatal(err)
	}
	set := func(regions ...string) error {
		_, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: "acme/geo", Regions: regions})
		return err
	}
	// Bad input changes nothing and names the region.
	wantCode(t, "region outside allowed_regions and unknown", set("b", "zz"), codes.InvalidArgument, `"zz"`)
	_, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: broker.DefaultNamespace, Regions: []string{"b", "zz"}})
	wantCode(t, "unknown region", err, codes.InvalidArgument, `"zz"`, "unknown", "known: [b,c,test]")
	wantCode(t, "region outside allowed_regions", set("c"), codes.InvalidArgument, `"c"`, "allowed_regions")
	wantCode(t, "bad name", set("b/x"), codes.InvalidArgument, "regions[0]")
	wantCode(t, "duplicate", set("b", "b"), codes.InvalidArgument, "twice")
	wantCode(t, "missing namespace", func() error {
		_, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: "acme/none", Regions: []string{"b"}})
		return err
	}(), codes.NotFound)
	got, err := adm.GetNamespaceReplication(ctx, &clientv1.GetNamespaceReplicationRequest{Namespace: "acme/geo"})
	if err != nil || len(got.Regions) != 0 {
		t.Fatalf("after refused sets: %v %v, want no regions", got, err)
	}

	// The list need not name the local region; ReplicationRegions adds it.
	if err := set("b"); err != nil {
		t.Fatal(err)
	}
	got, err = adm.GetNamespaceReplication(ctx, &clientv1.GetNamespaceReplicationRequest{Namespace: "acme/geo"})
	if err != nil || !slices.Equal(got.Regions, []string{"b"}) || got.Stale {
		t.Fatalf("get-replication: %v %v", got, err)
	}
	name := broker.TopicName{Tenant: "acme", Namespace: "geo", Topic: "t"}
	eff, err := rc.Broker(0).ReplicationRegions(ctx, name)
	if err != nil || !slices.Equal(eff, []string{"b", regiontest.Region}) {
		t.Fatalf("ReplicationRegions: %v %v", eff, err)
	}

	// Topic override, validated the same way, then removed.
	_, err = adm.SetTopicReplication(ctx, &clientv1.SetTopicReplicationRequest{Topic: "acme/geo/t", Regions: []string{"c"}})
	wantCode(t, "topic override outside allowed_regions", err, codes.InvalidArgument, `"c"`)
	if _, err := adm.SetTopicReplication(ctx, &clientv1.SetTopicReplicationRequest{Topic: "acme/geo/t", Regions: []string{}}); err != nil {
		t.Fatal(err)
	}
	tr, err := adm.GetTopicReplication(ctx, &clientv1.GetTopicReplicationRequest{Topic: "acme/geo/t"})
	if err != nil || !tr.HasOverride || len(tr.EffectiveRegions) != 0 {
		t.Fatalf("topic override off: %v %v", tr, err)
	}
	if eff, _ := rc.Broker(0).ReplicationRegions(ctx, name); eff != nil {
		t.Fatalf("ReplicationRegions with override off: %v", eff)
	}
	if _, err := adm.RemoveTopicReplication(ctx, &clientv1.RemoveTopicReplicationRequest{Topic: "acme/geo/t"}); err != nil {
		t.Fatal(err)
	}
	_, err = adm.RemoveTopicReplication(ctx, &clientv1.RemoveTopicReplicationRequest{Topic: "acme/geo/t"})
	wantCode(t, "remove twice", err, codes.NotFound)
	tr, err = adm.GetTopicReplication(ctx, &clientv1.GetTopicReplicationRequest{Topic: "acme/geo/t"})
	if err != nil || tr.HasOverride || !slices.Equal(tr.EffectiveRegions, []string{"b", regiontest.Region}) {
		t.Fatalf("after remove: %v %v", tr, err)
	}

	// Tenant allowed regions: cannot strand a namespace; widening lets c in.
	_, err = adm.SetTenantAllowedRegions(ctx, &clientv1.SetTenantAllowedRegionsRequest{Tenant: "acme", AllowedRegions: []string{regiontest.Region}})
	wantCode(t, "narrow allowed regions under a namespace", err, codes.FailedPrecondition, "acme/geo", `"b"`)
	if _, err := adm.SetTenantAllowedRegions(ctx, &clientv1.SetTenantAllowedRegionsRequest{Tenant: "acme", AllowedRegions: []string{regiontest.Region, "b", "c"}}); err != nil {
		t.Fatal(err)
	}
	ti, err := adm.GetTenant(ctx, &clientv1.GetTenantRequest{Tenant: "acme"})
	if err != nil || len(ti.AllowedRegions) != 3 {
		t.Fatalf("get tenant: %v %v", ti, err)
	}

	// JSON over HTTP, like every admin RPC.
	body := `{"namespace":"acme/geo","regions":["b","c"]}`
	resp, err := http.Post("http://"+rc.Broker(0).HTTPAddr()+"/admin/v1/SetNamespaceReplication", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP set-replication: %s", resp.Status)
	}
	resp, err = http.Post("http://"+rc.Broker(0).HTTPAddr()+"/admin/v1/SetNamespaceReplication", "application/json", strings.NewReader(`{"namespace":"acme/geo","regions":["nowhere"]}`))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(msg, []byte("nowhere")) {
		t.Fatalf("HTTP bad region: %s %s", resp.Status, msg)
	}
	eff, err = rc.Broker(0).ReplicationRegions(ctx, name)
	if err != nil || !slices.Equal(eff, []string{"b", "c", regiontest.Region}) {
		t.Fatalf("ReplicationRegions after HTTP set: %v %v", eff, err)
	}
	// The tenant's allowed regions limit what a namespace replicates to
	// even when set by a path that does not check (a record written
	// before the tenant was narrowed).
	rec, _ := json.Marshal(map[string][]string{"allowed_regions": {regiontest.Region, "c"}})
	if _, err := rc.Global.Put(ctx, "tenants/acme", rec, metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "tenant change to reach the broker's policy cache", func() bool {
		eff, err := rc.Broker(0).ReplicationRegions(ctx, name)
		return err == nil && slices.Equal(eff, []string{"c", regiontest.Region})
	})
}

// TestSendReplicationOptions checks Send.replicate_to validation and that
// the options are stored in the entry's metadata.
func TestSendReplicationOptions(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	cli, adm := conn(t, rc.Addrs()[0])
	ctx := context.Background()
	registerRegion(t, rc.Global, "b", "127.0.0.1:1")
	registerRegion(t, rc.Global, "c", "127.0.0.1:1")
	if _, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: broker.DefaultNamespace, Regions: []string{"b", "c"}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/default/repl-opts"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	send := func(seq int64, to []string, disable bool) *clientv1.SendReceipt {
		req := sendRequest(seq, []byte{byte('a' + seq)})
		req.GetSend().ReplicateTo, req.GetSend().DisableReplication = to, disable
		if err := p.st.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := p.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r.GetReceipt()
	}
	refused := func(what string, rc *clientv1.SendReceipt, part string) {
		t.Helper()
		if rc.GetError().GetCode() != clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(rc.GetError().GetMessage(), part) {
			t.Fatalf("%s: receipt %v, want INVALID_ARGUMENT naming %s", what, rc, part)
		}
	}
	refused("region not replicated to", send(0, []string{"b", "zz"}, false), `"zz"`)
	refused("bad region name", send(0, []string{"b c"}, false), "replicate_to[0]")
	many := make([]string, broker.MaxReplicateTo+1)
	for i := range many {
		many[i] = "b"
	}
	refused("too many", send(0, many, false), "limit 16")
	refused("both options", send(0, []string{"b"}, true), "exclusive")
	for seq, c := range []struct {
		to      []string
		disable bool
	}{{nil, false}, {[]string{"c"}, false}, {nil, true}} {
		if r := send(int64(seq), c.to, c.disable); r.GetError() != nil {
			t.Fatalf("send %d: %v", seq, r.GetError())
		}
	}
	cons := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var mds []*clientv1.EntryMetadata
	for len(mds) < 3 {
		r, err := cons.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m := r.GetMessage(); m != nil {
			if _, err := wire.DecodeBatch(m.Metadata, m.Payload); err != nil {
				t.Fatal(err)
			}
			mds = append(mds, m.Metadata)
		}
	}
	if len(mds[0].ReplicateTo) != 0 || mds[0].DisableReplication {
		t.Fatalf("entry 0 metadata: %v", mds[0])
	}
	if !slices.Equal(mds[1].ReplicateTo, []string{"c"}) || mds[1].DisableReplication {
		t.Fatalf("entry 1 metadata: %v", mds[1])
	}
	if len(mds[2].ReplicateTo) != 0 || !mds[2].DisableReplication {
		t.Fatalf("entry 2 metadata: %v", mds[2])
	}
	for i, md := range mds {
		if md.OriginRegion != regiontest.Region {
			t.Fatalf("entry %d origin_region %q", i, md.OriginRegion)
		}
	}
}

// regionHealth is the WAN pool's side of broker.RegionHealth for the test:
// it knows region "w" only.
type regionHealth struct{ seen time.Time }

func (h regionHealth) Region(name string) (bool, time.Time, bool) {
	if name == "w" {
		return false, h.seen, true
	}
	return false, time.Time{}, false
}

func TestListRegions(t *testing.T) {
	seen := time.UnixMilli(1_700_000_000_000)
	deadAddr := metadatatest.FreeAddr(t) // closed port: nothing answers
	addr1 := metadatatest.FreeAddr(t)
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 1, Broker: func(i int, c *broker.Config) {
		if i == 0 {
			c.RegionHealth = regionHealth{seen: seen}
			// "d" registers an address this broker reaches only through
			// its dial rewrite (as `meridian dev` routes through proxies).
			c.DialRewrite = map[string]string{"127.0.0.1:9": addr1}
		} else {
			c.GRPCAddress = addr1
		}
	}})
	ctx := context.Background()
	// b is served by a live broker (broker 1 stands in for a remote
	// region's broker: the probe only needs a Meridian broker answering).
	registerRegion(t, rc.Global, "b", rc.Addrs()[1])
	registerRegion(t, rc.Global, "c", deadAddr)
	registerRegion(t, rc.Global, "d", "127.0.0.1:9")
	registerRegion(t, rc.Global, "w", deadAddr)
	rc.Broker(0).SetReplicationLagSource(func(region string) (broker.ReplicationLag, bool) {
		if region != "b" {
			return broker.ReplicationLag{}, false
		}
		return broker.ReplicationLag{Topics: 2, BacklogMessages: 7, BacklogBytes: 700, MaxLag: 1500 * time.Millisecond}, true
	})
	_, adm := conn(t, rc.Addrs()[0])
	resp, err := adm.ListRegions(ctx, &clientv1.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]*clientv1.RegionStatus{}
	var names []string
	for _, r := range resp.Regions {
		by[r.Name] = r
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"b", "c", "d", regiontest.Region, "w"}) {
		t.Fatalf("regions %v", names)
	}
	if l := by[regiontest.Region]; !l.Local || !l.Reachable || len(l.Endpoints) != 2 {
		t.Fatalf("local region: %v", l)
	}
	if b := by["b"]; !b.Reachable || b.HealthSource != "probe" || b.LastSeenMs == 0 || !b.Replication.GetAvailable() ||
		b.Replication.GetBacklogMessages() != 7 || b.Replication.GetMaxLagMs() != 1500 {
		t.Fatalf("region b: %v", b)
	}
	if c := by["c"]; c.Reachable || c.HealthSource != "probe" || c.HealthError == "" || c.LastSeenMs != 0 || c.Replication.GetAvailable() {
		t.Fatalf("region c: %v", c)
	}
	if d := by["d"]; !d.Reachable {
		t.Fatalf("region d (through the dial rewrite): %v", d)
	}
	if w := by["w"]; w.Reachable || w.HealthSource != "wan" || w.LastSeenMs != seen.UnixMilli() {
		t.Fatalf("region w (WAN pool): %v", w)
	}
}
