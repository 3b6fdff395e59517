package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestStandalonePprofServes(t *testing.T) {
	ln, err := servePprofTestAddr(t)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/mutex?debug=1", "/debug/pprof/block?debug=1"} {
		resp, err := c.Get("http://" + ln + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: status %d, %d bytes", path, resp.StatusCode, len(body))
		}
	}
}

func TestStandalonePprofBadAddress(t *testing.T) {
	_, _, err := servePprof("256.0.0.1:bad", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--pprof") {
		t.Fatalf("want an error naming --pprof, got %v", err)
	}
}

// servePprofTestAddr starts servePprof on a free loopback port and
// returns its address; the server stops with the test.
func servePprofTestAddr(t *testing.T) (string, error) {
	t.Helper()
	addr, stop, err := servePprof("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	t.Cleanup(stop)
	return addr, nil
}
