package metadata_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

func postClock(t *testing.T, url, body string) (int, metadata.ClockSkewStatus, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metadata.ClockSkewStatus
	var raw strings.Builder
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
	} else {
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		raw.Write(b[:n])
	}
	return resp.StatusCode, st, raw.String()
}

// /debug/clock exists only under fault_injection and skews the node's
// clock; bad input names the field and changes nothing.
func TestDebugClockSkew(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{HTTP: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.FaultInjection = true
	}})
	url := "http://" + c.Node(0).HTTPAddr() + "/debug/clock"
	code, st, body := postClock(t, url, `{"skew":"+90s"}`)
	if code != http.StatusOK || st.Skew != "1m30s" {
		t.Fatalf("POST: %d %+v %s", code, st, body)
	}
	if d := time.Until(st.Now); d < 80*time.Second || d > 100*time.Second {
		t.Fatalf("skewed time %v ahead, want ~90s", d)
	}
	// Writes still work on a node whose clock jumped.
	ctx := ctxT(t)
	s := c.Store(0, metadata.GlobalShard)
	must[metadata.KV](t)(s.Put(ctx, "k", []byte("v"), 0, 0))
	for _, bad := range []string{`{"skew":"soon"}`, `{"skew":"2h"}`, `{"skew":"-2h"}`, `not json`} {
		code, _, body := postClock(t, url, bad)
		if code != http.StatusBadRequest || !strings.Contains(body, "skew") {
			t.Errorf("%s: %d %q", bad, code, body)
		}
	}
	if code, b := httpGet(t, url); code != 200 || !strings.Contains(b, `"skew":"1m30s"`) {
		t.Fatalf("GET after bad input: %d %s", code, b)
	}
	code, st, _ = postClock(t, url, `{"skew":"-3s"}`)
	if code != http.StatusOK || st.Skew != "-3s" {
		t.Fatalf("POST -3s: %d %+v", code, st)
	}
	must[metadata.KV](t)(s.Put(ctx, "k", []byte("v2"), 0, 0))
	if code, _, _ = postClock(t, url, `{"skew":"0"}`); code != http.StatusOK {
		t.Fatal(code)
	}

	plain := metadatatest.StartClusterWith(t, 1, metadatatest.Options{HTTP: true})
	if code, _, _ := postClock(t, "http://"+plain.Node(0).HTTPAddr()+"/debug/clock", `{"skew":"1s"}`); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Fatalf("/debug/clock without fault_injection: %d", code)
	}
}
