package topology

import (
	"testing"
)

func BenchmarkRackAwareNewEnsembleE3(b *testing.B) {
	benchNewEnsemble(b, 3, 3, bookies("r/a:10", "r/b:10", "r/c:10"))
}

func BenchmarkRackAwareNewEnsembleE8Qw3(b *testing.B) {
	benchNewEnsemble(b, 8, 3, bookies("r/a:20", "r/b:20", "r/c:20", "r/d:20", "r/e:5"))
}

func benchNewEnsemble(b *testing.B, e, w int, topo []BookieInfo) {
	cfg := DefaultRackAwareConfig()
	cfg.Enforce = true
	p, err := NewRackAwarePlacement(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.NewEnsemble(e, w, 2, topo, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRackAwareReplaceBookie(b *testing.B) {
	topo := bookies("r/a:20", "r/b:20", "r/c:20")
	p, err := NewRackAwarePlacement(DefaultRackAwareConfig())
	if err != nil {
		b.Fatal(err)
	}
	ens, err := p.NewEnsemble(5, 3, 2, topo, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ReplaceBookie(ens, 3, 2, topo, nil); err != nil {
			b.Fatal(err)
		}
	}
}
