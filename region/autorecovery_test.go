package region

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func arAdmin(t *testing.T, addr string) clientv1.AdminClient {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientv1.NewAdminClient(c)
}

func metricValue(t *testing.T, httpAddr, name string) (string, bool) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v, true
		}
	}
	return "", false
}

func arPoll(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStandaloneAutorecovery: the standalone's auditor runs and reports.
// Decommissioning its only bookie marks the closed ledger under-replicated
// (nowhere to copy it), visible in the admin API (gRPC and HTTP JSON) and
// in /metrics; recommissioning resolves the mark; pause/resume round-trip;
// bad input is refused and changes nothing. Data stays readable.
func TestStandaloneAutorecovery(t *testing.T) {
	sa := startSA(t, t.TempDir())
	defer sa.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := arAdmin(t, sa.GRPCAddr())

	lb, err := adm.ListBookies(ctx, &clientv1.ListBookiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.GetBookies()) != 1 || lb.GetBookies()[0].GetBookieId() != "bookie-0" || !lb.GetBookies()[0].GetLive() || lb.GetBookies()[0].GetAddress() == "" {
		t.Fatalf("ListBookies: %v", lb)
	}
	arPoll(t, "auditor elected and its metrics on /metrics", 30*time.Second, func() (bool, string) {
		l, _ := metricValue(t, sa.HTTPAddr(), "meridian_autorecovery_auditor_leader")
		u, ok := metricValue(t, sa.HTTPAddr(), "meridian_autorecovery_under_replicated_ledgers")
		return l == "1" && ok && u == "0", fmt.Sprintf("leader=%q under_replicated=%q", l, u)
	})

	const topic = "public/default/ar"
	ids := produce(t, dial(t, sa.GRPCAddr()), topic, 0, 5)
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}

	// Bad input: refused, nothing changed.
	for _, id := range []string{"", "a/b", strings.Repeat("x", 300)} {
		_, err := adm.DecommissionBookie(ctx, &clientv1.DecommissionBookieRequest{BookieId: id})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bookie ID") {
			t.Fatalf("decommission %q: %v", id, err)
		}
	}
	if _, err := adm.PauseAutorecovery(ctx, &clientv1.PauseAutorecoveryRequest{Reason: strings.Repeat("r", 2000)}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("pause with a 2000-byte reason: %v", err)
	}
	st, err := adm.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
	if err != nil || st.GetPaused() || st.GetAuditor() != "standalone-0" || st.GetUnderReplicatedCount() != 0 || len(st.GetBookies()) != 1 || st.GetBookies()[0].GetDecommissioned() {
		t.Fatalf("status after bad input: %v %v", st, err)
	}

	if _, err := adm.PauseAutorecovery(ctx, &clientv1.PauseAutorecoveryRequest{Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	st, err = adm.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
	if err != nil || !st.GetPaused() || st.GetPausedReason() != "maintenance" {
		t.Fatalf("status after pause: %v %v", st, err)
	}
	if _, err := adm.ResumeAutorecovery(ctx, &clientv1.ResumeAutorecoveryRequest{}); err != nil {
		t.Fatal(err)
	}

	// Decommission the only bookie: its closed ledger is marked.
	if _, err := adm.DecommissionBookie(ctx, &clientv1.DecommissionBookieRequest{BookieId: "bookie-0"}); err != nil {
		t.Fatal(err)
	}
	arPoll(t, "closed ledger marked under-replicated", 30*time.Second, func() (bool, string) {
		st, err := adm.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		u, _ := metricValue(t, sa.HTTPAddr(), "meridian_autorecovery_under_replicated_ledgers")
		b := st.GetBookies()
		return st.GetUnderReplicatedCount() >= 1 && len(st.GetUnderReplicated()) >= 1 &&
			len(st.GetUnderReplicated()[0].GetMissing()) == 1 && st.GetUnderReplicated()[0].GetMissing()[0] == "bookie-0" &&
			len(b) == 1 && b[0].GetDecommissioned() && b[0].GetUnderReplicatedLedgers() >= 1 && u != "" && u != "0", fmt.Sprintf("%v metric=%q", st, u)
	})
	// The same through the HTTP JSON admin API.
	resp, err := http.Post("http://"+sa.HTTPAddr()+"/admin/v1/ListBookies", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var hj struct {
		Bookies []struct {
			BookieID       string `json:"bookieId"`
			Decommissioned bool   `json:"decommissioned"`
		} `json:"bookies"`
		UnderReplicatedCount string `json:"underReplicatedCount"`
	}
	err = json.NewDecoder(resp.Body).Decode(&hj)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(hj.Bookies) != 1 || hj.Bookies[0].BookieID != "bookie-0" || !hj.Bookies[0].Decommissioned || hj.UnderReplicatedCount == "0" {
		t.Fatalf("HTTP ListBookies: %d %+v %v", resp.StatusCode, hj, err)
	}
	resp, err = http.Post("http://"+sa.HTTPAddr()+"/admin/v1/DecommissionBookie", "application/json", strings.NewReader(`{"bookieId":"x/y"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("HTTP DecommissionBookie x/y: status %d", resp.StatusCode)
	}

	// Recommission: the bookie is live and still has the data, so the
	// worker resolves the mark without copying.
	if _, err := adm.RecommissionBookie(ctx, &clientv1.RecommissionBookieRequest{BookieId: "bookie-0"}); err != nil {
		t.Fatal(err)
	}
	arPoll(t, "mark resolved after recommission", 60*time.Second, func() (bool, string) {
		st, err := adm.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		return st.GetUnderReplicatedCount() == 0 && !st.GetBookies()[0].GetDecommissioned(), fmt.Sprint(st)
	})
	got := consume(t, dial(t, sa.GRPCAddr()), topic, "s", len(ids))
	for i := range ids {
		if !slices.Contains(got, fmt.Sprintf("m%d", i)) {
			t.Fatalf("acknowledged message m%d (%s) lost; consumed %v", i, ids[i], got)
		}
	}
}
