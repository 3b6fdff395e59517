package metadata_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/prometheus/client_golang/prometheus"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestNodeHTTPAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{HTTP: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.Registerer = reg
	}})
	base := "http://" + c.Node(0).HTTPAddr()
	if code, body := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("healthz %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}
	s := c.Store(0, metadata.GlobalShard)
	ctx := ctxT(t)
	must[metadata.KV](t)(s.Put(ctx, "m", nil, 0, 0))
	must[metadata.KV](t)(s.Get(ctx, "m", metadata.ReadOptions{}))
	sess := must[metadata.SessionID](t)(s.CreateSession(ctx, 500*time.Millisecond))
	_ = sess
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := httpGet(t, base+"/metrics")
		ok := true
		for _, want := range []string{
			`meridian_metadata_proposals_total{result="ok",shard="global"}`,
			`meridian_metadata_reads_total{kind="linearizable",result="ok",shard="global"}`,
			`meridian_metadata_leader_changes_total{shard="global"}`,
			`meridian_metadata_has_leader{shard="global"} 1`,
			`meridian_metadata_session_expiries_total{shard="global"} 1`,
			`meridian_metadata_proposal_duration_seconds_bucket`,
		} {
			if !strings.Contains(body, want) {
				ok = false
				if time.Now().After(deadline) {
					t.Fatalf("metrics lack %s:\n%s", want, body)
				}
			}
		}
		if ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.StopNode(0)
	if _, err := http.Get(base + "/readyz"); err == nil {
		t.Fatal("HTTP still served after Stop")
	}
}
