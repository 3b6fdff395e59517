package metadata_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// BenchmarkStore measures Put (any version) and CAS (Put with the exact
// current version) on 1 and 3 nodes, through the leader's in-process Store
// and through the gRPC client (endpoints list starting at the leader), one
// writer (latency) and 16 concurrent writers (throughput).
//
//	go test -run '^$' -bench Store -benchtime 2000x ./metadata/
func BenchmarkStore(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		c := metadatatest.StartClusterWith(b, nodes, metadatatest.Options{GRPC: true})
		leader := c.Leader(metadata.GlobalShard)
		eps := c.Endpoints()
		eps = append(eps[leader:], eps[:leader]...)
		stores := map[string]metadata.Store{
			"local": c.Store(leader, metadata.GlobalShard),
			"grpc":  newClient(b, eps, metadata.GlobalShard),
		}
		for _, via := range []string{"local", "grpc"} {
			for _, op := range []string{"Put", "CAS"} {
				for _, clients := range []int{1, 16} {
					b.Run(fmt.Sprintf("%s/nodes=%d/via=%s/clients=%d", op, nodes, via, clients), func(b *testing.B) {
						benchWrites(b, stores[via], op == "CAS", clients)
					})
				}
			}
		}
	}
}

var benchRun atomic.Int64

func benchWrites(b *testing.B, st metadata.Store, cas bool, clients int) {
	run := benchRun.Add(1)
	ctx := context.Background()
	value := make([]byte, 100)
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	per := (b.N + clients - 1) / clients
	b.ResetTimer()
	start := time.Now()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench/%d/%d", run, w)
			version := metadata.MustNotExist
			for range per {
				expected := metadata.AnyVersion
				if cas {
					expected = version
				}
				t0 := time.Now()
				kv, err := st.Put(ctx, key, value, expected, 0)
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
				version = kv.Version
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}
