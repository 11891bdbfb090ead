package dashboard

import (
	"strconv"
	"strings"
	"time"
)

// chart is a lag-over-time line chart, laid out on the server so that it is
// plain SVG: no script, no inline style.
type chart struct {
	Empty      bool
	W, H       int
	X0, X1     int // plot area left and right
	XLabelY    int
	From, To   string
	Line, Area string
	Points     []chartPoint
	Grid       []gridLine
}

type chartPoint struct {
	X, Y float64
	Lag  int64
	At   time.Time
}

type gridLine struct {
	X1, X2, Y, LX, LY float64
	Label             string
}

func newChart(samples []sample) chart {
	c := chart{W: 760, H: 200, X0: 64, X1: 744, XLabelY: 194}
	if len(samples) == 0 {
		c.Empty = true
		return c
	}
	const top, bottom = 12.0, 172.0
	var peak int64
	for _, s := range samples {
		peak = max(peak, s.Lag)
	}
	ceil := niceCeil(peak)
	t0, t1 := samples[0].At, samples[len(samples)-1].At
	span := t1.Sub(t0)
	x := func(t time.Time) float64 {
		if span <= 0 {
			return float64(c.X0+c.X1) / 2
		}
		return float64(c.X0) + float64(c.X1-c.X0)*float64(t.Sub(t0))/float64(span)
	}
	y := func(v int64) float64 { return bottom - (bottom-top)*float64(v)/float64(ceil) }
	var line, area strings.Builder
	for i, s := range samples {
		p := chartPoint{X: round1(x(s.At)), Y: round1(y(s.Lag)), Lag: s.Lag, At: s.At}
		c.Points = append(c.Points, p)
		if i > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(fmtF(p.X) + "," + fmtF(p.Y))
	}
	first, last := c.Points[0], c.Points[len(c.Points)-1]
	area.WriteString("M" + fmtF(first.X) + "," + fmtF(bottom))
	for _, p := range c.Points {
		area.WriteString(" L" + fmtF(p.X) + "," + fmtF(p.Y))
	}
	area.WriteString(" L" + fmtF(last.X) + "," + fmtF(bottom) + " Z")
	c.Line, c.Area = line.String(), area.String()
	for _, v := range []int64{0, ceil / 2, ceil} {
		yy := round1(y(v))
		c.Grid = append(c.Grid, gridLine{X1: float64(c.X0), X2: float64(c.X1), Y: yy, LX: float64(c.X0 - 8), LY: yy + 4, Label: formatInt(v)})
	}
	c.From = t0.UTC().Format("15:04:05")
	c.To = t1.UTC().Format("15:04:05 UTC")
	if span <= 0 {
		c.From = ""
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1), so
// the axis reads in round numbers.
func niceCeil(v int64) int64 {
	if v <= 1 {
		return 1
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func fmtF(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
