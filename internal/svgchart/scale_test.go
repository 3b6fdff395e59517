package svgchart

import "testing"

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.3, 0.5}, {1, 1}, {1.01, 2}, {3, 5}, {7, 10}, {120, 200}, {2000, 2000}, {2000.0000001, 2000},
	} {
		if got := NiceCeil(c.in); got != c.want {
			t.Errorf("NiceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{{0, "0"}, {0.256, "0.26"}, {50, "50"}, {1500, "1.5k"}, {2e6, "2M"}} {
		if got := TickLabel(c.in); got != c.want {
			t.Errorf("TickLabel(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
