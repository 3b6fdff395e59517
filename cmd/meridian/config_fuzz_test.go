package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meridianmq/meridian/metadata"
)

// FuzzConfigYAML feeds arbitrary YAML to the three config loaders
// (metadata, bookie, broker), seeded with the deploy samples. None may
// panic; whatever the metadata and bookie loaders accept also validates
// on its own (they validate as they load), and a broker config they
// accept names its metadata endpoints and region.
func FuzzConfigYAML(f *testing.F) {
	samples, _ := filepath.Glob(filepath.Join(sampleDir, "*.yaml"))
	for _, p := range samples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	// yaml.v3 refuses excessive aliasing (a "billion laughs" document).
	f.Add([]byte("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if cfg, err := metadata.ParseNodeConfig(data); err == nil {
			if err := cfg.Validate(); err != nil {
				t.Fatalf("metadata config accepted, then invalid: %v", err)
			}
		}
		if cfg, _, err := parseBookieConfig(data); err == nil {
			if err := cfg.Validate(); err != nil {
				t.Fatalf("bookie config accepted, then invalid: %v", err)
			}
		}
		if fc, err := loadBrokerConfig(data); err == nil {
			if len(fc.Metadata.Endpoints) == 0 || fc.Broker.Region == "" {
				t.Fatalf("broker config accepted without endpoints or region: %+v", fc.Metadata)
			}
		}
	})
}
