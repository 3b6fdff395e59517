package region_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
)

// Origin incarnations (broker/originstream.go): a region whose per-topic
// origin_seq counter starts again (topic deleted and written again, the
// region's metadata wiped and rebuilt under the same name) must keep
// replicating: its new entries are a new origin stream, never answered
// DUPLICATE of the old one's.

// closeProducer closes gp's client (its producer goes away).
func closeProducer(gp *geoProducer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = gp.cl.Close(ctx)
}

// TestGeoDeleteRecreateReplicates: 100 produced in a reach b; the topic is
// deleted in a (--force) and 50 more are produced in a: all 150 reach b,
// none twice, and a holds the 50.
func TestGeoDeleteRecreateReplicates(t *testing.T) {
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	closeProducer(pa)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.DeleteTopic(ctx, topic, true); err != nil {
		t.Fatalf("delete %s in a: %v", topic, err)
	}

	pa2 := g.producer("a", topic)
	pa2.next = 100 // message keys go on after the first 100
	pa2.send(50)
	if n := len(pa2.ackedKeys()); n != 50 {
		t.Fatalf("%d of 50 sends acknowledged after the re-creation", n)
	}
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa, pa2})
	ra := g.reader("a", topic)
	g.converge(geoConverge, []*geoReader{ra}, []*geoProducer{pa2})
}

// TestGeoRegionMetadataWipeReplicates: region a's broker crashes and its
// regional metadata of topics (ledger lists, cursors, ownership) is wiped,
// as a region rebuilt from nothing under the same name; the broker starts
// again and 50 more are produced in a: b gets all 150, none twice.
// (In process: the bookies' old ledgers stay, unreferenced.)
func TestGeoRegionMetadataWipeReplicates(t *testing.T) {
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	closeProducer(pa)

	g.kill("a", 0)
	wipeRegionalTopics(t, g.m.Region("a").Regional)
	g.restart("a", 0)

	pa2 := g.producer("a", topic)
	pa2.next = 100
	pa2.send(50)
	if n := len(pa2.ackedKeys()); n != 50 {
		t.Fatalf("%d of 50 sends acknowledged after the rebuild", n)
	}
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa, pa2})
}

// wipeRegionalTopics deletes every topic's state from a regional shard:
// ledger lists, cursors and ownership claims.
func wipeRegionalTopics(t *testing.T, st metadata.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for _, prefix := range []string{"managed-ledgers/", "cursors/", "owners/"} {
		for {
			res, err := st.List(ctx, prefix, metadata.Page{}, metadata.ReadOptions{})
			if err != nil {
				t.Fatalf("list %s: %v", prefix, err)
			}
			for _, kv := range res.KVs {
				if err := st.Delete(ctx, kv.Key, metadata.AnyVersion); err != nil && !strings.Contains(err.Error(), "not found") {
					t.Fatalf("delete %s: %v", kv.Key, err)
				}
				n++
			}
			if !res.More {
				break
			}
		}
	}
	if n == 0 {
		t.Fatal("nothing to wipe: the topic left no regional metadata")
	}
	t.Logf("wiped %d regional keys", n)
}
