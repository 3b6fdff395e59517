package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseDurationFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10s": 10 * time.Second, "30m": 30 * time.Minute, "1h": time.Hour, "7d": 7 * 24 * time.Hour,
		"2w": 14 * 24 * time.Hour, "1h30m": 90 * time.Minute, "120": 2 * time.Minute, "0": 0, "-1": -1,
	} {
		got, err := parseDurationFlag("--ttl", in)
		if err != nil || got != want {
			t.Errorf("parseDurationFlag(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1y", "-5s", "-2", "d", "99999999999999999d"} {
		_, err := parseDurationFlag("--ttl", in)
		if err == nil || !strings.Contains(err.Error(), "--ttl") {
			t.Errorf("parseDurationFlag(%q): %v, want an error naming --ttl", in, err)
		}
	}
}

func TestParseSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"100": 100, "10K": 10 << 10, "512M": 512 << 20, "100G": 100 << 30, "1T": 1 << 40, "10kb": 10 << 10, "0": 0, "-1": -1,
	} {
		got, err := parseSizeFlag("--limit", in)
		if err != nil || got != want {
			t.Errorf("parseSizeFlag(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1.5G", "-3", "10X", "99999999999T"} {
		_, err := parseSizeFlag("--limit", in)
		if err == nil || !strings.Contains(err.Error(), "--limit") {
			t.Errorf("parseSizeFlag(%q): %v, want an error naming --limit", in, err)
		}
	}
}
