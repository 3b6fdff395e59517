package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestLoadBrokerConfig(t *testing.T) {
	data, err := os.ReadFile("../../deploy/config/broker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := loadBrokerConfig(data)
	if err != nil {
		t.Fatalf("sample config: %v", err)
	}
	if fc.Broker.Region != "local" || fc.Metadata.RegionalShard != "local" || fc.Broker.DefaultEnsembleSize != 1 || fc.Broker.MaxMessageBytes != 5<<20 {
		t.Fatalf("sample config parsed as %+v", fc)
	}
	fc, err = loadBrokerConfig([]byte("broker:\n  region: r\n  session_ttl: 3s\n  rollover_age: 90m\nmetadata:\n  endpoints: [a:1]\n"))
	if err != nil || fc.Broker.SessionTTL != 3*time.Second || fc.Broker.RolloverAge != 90*time.Minute {
		t.Fatalf("durations: %+v %v", fc.Broker, err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"broker:\n  region: r\n  no_such_field: 1\nmetadata:\n  endpoints: [a:1]\n", "no_such_field"},
		{"broker:\n  region: r\n", "metadata.endpoints"},
		{"metadata:\n  endpoints: [a:1]\n", "broker.region"},
		{"broker:\n  region: r\n  session_ttl: soon\nmetadata:\n  endpoints: [a:1]\n", "soon"},
	} {
		if _, err := loadBrokerConfig([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("config %q: error %v, want mention of %q", bad.yaml, err, bad.want)
		}
	}
}
