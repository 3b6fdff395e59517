//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/drill"
)

// Process-level tests of `meridian drill`: a `meridian dev` cluster of
// separate processes, the drill run as a CLI process against its
// cluster.json, and the report read back from its JSON line and files.

// runDrill runs `meridian drill ARGS --output json` with a generous
// timeout and returns the parsed report, the exit code and stderr.
func runDrill(t *testing.T, timeout time.Duration, args ...string) (drill.Report, int, string) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append(append([]string{"drill"}, args...), "--output", "json")...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("drill %v: still running after %v; stderr:\n%s", args, timeout, tail(se.String(), 6000))
	}
	var rep drill.Report
	code := cmd.ProcessState.ExitCode()
	if code != 2 {
		lines := strings.Split(strings.TrimSpace(so.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("drill %v: exit %d, want one JSON line on stdout, got %q; stderr:\n%s", args, code, so.String(), tail(se.String(), 6000))
		}
		if err := json.Unmarshal([]byte(lines[0]), &rep); err != nil {
			t.Fatalf("drill %v: JSON line %q: %v", args, lines[0], err)
		}
	}
	return rep, code, se.String()
}

// checkDrill asserts what every drill must show: it ran, the workload
// moved, nothing acknowledged was lost, the report files exist.
func checkDrill(t *testing.T, rep drill.Report, code int, stderr, reportDir string) {
	t.Helper()
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	t.Logf("drill report:\n%s", text.String())
	if code != 0 || rep.Lost != 0 {
		t.Fatalf("drill: exit %d, lost %d %v; stderr:\n%s", code, rep.Lost, rep.LostIDs, tail(stderr, 6000))
	}
	if rep.Acked == 0 || rep.AckedInFrom == 0 || rep.AckedInTo == 0 {
		t.Fatalf("drill: acknowledged %d (in %s %d, in %s %d): the workload did not run in both regions", rep.Acked, rep.From, rep.AckedInFrom, rep.To, rep.AckedInTo)
	}
	if rep.RTOPublishMs == nil || rep.RTODeliverMs == nil || len(rep.Switches) == 0 {
		t.Fatalf("drill: no publish or delivery in %s after the move (RTO %v / %v, switches %v)", rep.To, rep.RTOPublishMs, rep.RTODeliverMs, rep.Switches)
	}
	if rep.RPORecovered != rep.RPOMessages || rep.NotInTo != 0 {
		t.Fatalf("drill: RPO %d, %d arrived; %d never seen in %s", rep.RPOMessages, rep.RPORecovered, rep.NotInTo, rep.To)
	}
	if rep.Delivered != rep.Acked {
		t.Fatalf("drill: %d acknowledged, %d delivered", rep.Acked, rep.Delivered)
	}
	pending := "not read"
	if rep.AckPendingAtFault != nil {
		pending = fmt.Sprint(*rep.AckPendingAtFault)
	}
	t.Logf("duplicates: %d (%d after the move); acknowledgements not replicated at the move: %s", rep.Duplicates, rep.DuplicatesAfterFault, pending)
	for _, f := range []string{"report.html", "report.json", "report.txt"} {
		b, err := os.ReadFile(filepath.Join(reportDir, f))
		if err != nil || len(b) == 0 {
			t.Fatalf("report file %s: %v", f, err)
		}
		if f == "report.html" && (!bytes.Contains(b, []byte("<svg")) || bytes.Contains(b, []byte("<script"))) {
			t.Fatalf("report.html is not a self-contained page with an SVG chart")
		}
	}
}

// TestDrillFailover runs `meridian drill failover --fault kill-region`
// against `meridian dev --regions a,b` (one bookie and one broker per
// region): every process of a is killed, the clients fail over to b, a is
// restarted; the report must say lost = 0. Then `meridian drill
// switchback` moves a workload from b to a with the operator's switch.
// Bad input exits 2, naming the flag.
func TestDrillFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a dev cluster (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)
	d := startDev(t, dir, "--regions", "a,b", "--bookies", "1", "--brokers", "1")
	cluster := filepath.Join(dir, "cluster.json")

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"failover", "--cluster", cluster, "--fault", "flood"}, "--fault"},
		{[]string{"failover", "--cluster", cluster, "--from", "a", "--to", "a"}, "--from and --to"},
		{[]string{"failover", "--cluster", cluster, "--from", "x"}, `--from "x": not a region`},
		{[]string{"failover", "--cluster", cluster, "--rate", "0"}, "--rate"},
		{[]string{"failover", "--cluster", cluster, "--duration", "10s", "--fault-after", "20s"}, "--fault-after"},
		{[]string{"failover", "--cluster", cluster, "--mode", "reconnect", "--fault", "cut-links"}, "cut-links needs --mode client"},
		{[]string{"failover", "--cluster", t.TempDir()}, "no running cluster"},
	} {
		_, code, stderr := runDrill(t, time.Minute, bad.args...)
		if code != 2 || !strings.Contains(stderr, bad.want) {
			t.Fatalf("drill %v: exit %d, stderr %q; want exit 2 naming %q", bad.args, code, stderr, bad.want)
		}
	}

	report := filepath.Join(dir, "report-failover")
	rep, code, stderr := runDrill(t, 4*time.Minute, "failover", "--cluster", cluster, "--fault", "kill-region",
		"--rate", "50", "--duration", "15s", "--fault-after", "4s", "--heal-after", "8s",
		"--probe-interval", "250ms", "--drain-timeout", "90s", "--report", report)
	checkDrill(t, rep, code, stderr, report)
	if rep.Kind != "failover" || rep.Fault != "kill-region" || rep.HealAtMs == nil || rep.FaultAtMs == nil || rep.Switches[0].From != "a" || rep.Switches[0].To != "b" {
		t.Fatalf("drill failover report: %+v", rep)
	}
	// Every process of a runs again after the heal.
	for _, p := range d.status(t).Processes {
		if p.State != "running" {
			t.Fatalf("after the drill: %s is %s", p.Name, p.State)
		}
	}

	report = filepath.Join(dir, "report-switchback")
	rep, code, stderr = runDrill(t, 3*time.Minute, "switchback", "--cluster", cluster, "--from", "b", "--to", "a",
		"--rate", "50", "--duration", "8s", "--fault-after", "3s", "--probe-interval", "250ms", "--drain-timeout", "60s", "--report", report)
	checkDrill(t, rep, code, stderr, report)
	if rep.Kind != "switchback" || rep.Fault != "none" || rep.Switches[0].From != "b" || rep.Switches[0].To != "a" {
		t.Fatalf("drill switchback report: %+v", rep)
	}
}

// TestDrillFailoverLong is the full-size variant (MERIDIAN_LONG=1, `make
// test-long`): `meridian dev --regions a,b --wan-latency 40ms` with three
// bookies and two brokers per region, 500 msg/s, each fault in turn (each
// followed by a switchback), then kill-region with the drill-managed
// reconnect (--mode reconnect); every drill must lose nothing.
func TestDrillFailoverLong(t *testing.T) {
	if os.Getenv("MERIDIAN_LONG") == "" {
		t.Skip("MERIDIAN_LONG not set (make test-long)")
	}
	dir := t.TempDir()
	cliBinary(t)
	startDev(t, dir, "--regions", "a,b", "--wan-latency", "40ms")
	cluster := filepath.Join(dir, "cluster.json")
	for _, fault := range drill.Faults {
		t.Run(fault, func(t *testing.T) {
			report := filepath.Join(dir, "report-"+fault)
			rep, code, stderr := runDrill(t, 6*time.Minute, "failover", "--cluster", cluster, "--fault", fault,
				"--rate", "500", "--duration", "40s", "--drain-timeout", "2m", "--report", report)
			checkDrill(t, rep, code, stderr, report)
			rep, code, stderr = runDrill(t, 4*time.Minute, "switchback", "--cluster", cluster, "--from", "b", "--to", "a",
				"--rate", "500", "--duration", "20s", "--report", report+"-back")
			checkDrill(t, rep, code, stderr, report+"-back")
		})
	}
	t.Run("reconnect", func(t *testing.T) {
		report := filepath.Join(dir, "report-reconnect")
		rep, code, stderr := runDrill(t, 6*time.Minute, "failover", "--cluster", cluster, "--fault", "kill-region", "--mode", "reconnect",
			"--rate", "500", "--duration", "40s", "--drain-timeout", "2m", "--report", report)
		checkDrill(t, rep, code, stderr, report)
		if !strings.Contains(rep.ClientFailover, "drill-managed") {
			t.Fatalf("--mode reconnect: report says %q", rep.ClientFailover)
		}
	})
}
