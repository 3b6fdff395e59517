package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
)

// ScrubBookie reaches the bookie through the registry, over gRPC and as
// HTTP JSON; bad input and unknown bookies get clear errors.
func TestAdminScrubBookie(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	topic := "public/default/scrubbed"
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(10) {
		p.sendOK(i)
	}
	r, err := adm.ScrubBookie(ctx, &clientv1.ScrubBookieRequest{BookieId: rc.Bookies.ID(0)})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetBookieId() != rc.Bookies.ID(0) || r.GetEntriesChecked() < 10 || r.GetCorruptEntries() != 0 || len(r.GetDamagedLedgers()) != 0 {
		t.Fatalf("scrub: %+v", r)
	}
	// The Go client library's wrapper.
	ga, err := client.NewAdmin(ctx, rc.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close(ctx)
	if gr, err := ga.ScrubBookie(ctx, rc.Bookies.ID(0)); err != nil || gr.GetEntriesChecked() < 10 {
		t.Fatalf("client.Admin.ScrubBookie: %+v, %v", gr, err)
	}
	if _, err := ga.ScrubBookie(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("client.Admin.ScrubBookie of an unknown bookie: %v", err)
	}
	base := "http://" + rc.Broker(0).HTTPAddr()
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/admin/v1/ScrubBookie", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not JSON: %s", b)
		}
		return resp.StatusCode, m
	}
	if code, m := post(`{"bookieId":"` + rc.Bookies.ID(0) + `"}`); code != 200 || m["bookieId"] != rc.Bookies.ID(0) || m["entriesChecked"] == nil {
		t.Fatalf("scrub over HTTP: %d %v", code, m)
	}
	if code, m := post(`{"bookieId":"nope"}`); code != 404 || m["code"] != "ERROR_CODE_NOT_FOUND" || !strings.Contains(m["message"].(string), "not registered") {
		t.Fatalf("scrub of an unknown bookie: %d %v", code, m)
	}
	if code, m := post(`{}`); code != 400 || m["code"] != "ERROR_CODE_INVALID_ARGUMENT" || !strings.Contains(m["message"].(string), "bookie_id") {
		t.Fatalf("scrub without a bookie: %d %v", code, m)
	}
}
