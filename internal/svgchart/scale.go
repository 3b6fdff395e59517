// Package svgchart holds the small pieces the self-contained HTML reports
// (drills, chaos runs) share to draw their inline SVG charts.
package svgchart

import (
	"fmt"
	"math"
)

// NiceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0),
// a y-axis maximum a reader can take in at a glance.
func NiceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// TickLabel formats an axis value: 1.5k, 2M, 0.25.
func TickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}
