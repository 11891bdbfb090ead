// Command chart renders the median ratio of each pair in a CSV written by
// the peers benchmark as an SVG bar chart on a logarithmic scale, with 1×
// (parity) and each pair's target marked.
//
//	cd bench && go run ./cmd/chart -in peers.csv -out ../docs/performance.svg
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

type bar struct {
	name   string
	ratios []float64
	target float64
}

func main() {
	in := flag.String("in", "peers.csv", "CSV written by the peers benchmark")
	out := flag.String("out", "peers.svg", "SVG file to write")
	title := flag.String("title", "rheo ÷ peer, median of alternated rounds (log scale)", "chart title")
	md := flag.String("md", "", "also write every pair and figure as a Markdown table to this file")
	flag.Parse()
	if *md != "" {
		if err := writeMarkdown(*in, *md); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			os.Exit(1)
		}
	}
	bars, err := read(*in)
	if err == nil {
		var f *os.File
		if f, err = os.Create(*out); err == nil {
			render(f, *title, bars)
			err = f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

// read collects the ratios of every pair that has a peer, in file order.
func read(path string) ([]bar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || !slices.Equal(recs[0], []string{"pair", "round", "rheo", "rheo_per_s", "peer", "peer_per_s", "ratio", "target"}) {
		return nil, fmt.Errorf("%s is not a peers CSV (header %v)", path, recs[:min(1, len(recs))])
	}
	var bars []bar
	idx := map[string]int{}
	for _, r := range recs[1:] {
		if r[6] == "" {
			continue // no peer: an absolute figure
		}
		ratio, err := strconv.ParseFloat(r[6], 64)
		if err != nil || ratio <= 0 {
			return nil, fmt.Errorf("%s: pair %q: ratio %q", path, r[0], r[6])
		}
		target, _ := strconv.ParseFloat(r[7], 64)
		i, ok := idx[r[0]]
		if !ok {
			i = len(bars)
			idx[r[0]] = i
			bars = append(bars, bar{name: r[0], target: target})
		}
		bars[i].ratios = append(bars[i].ratios, ratio)
	}
	if len(bars) == 0 {
		return nil, fmt.Errorf("%s holds no pair with a peer", path)
	}
	return bars, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func render(w io.Writer, title string, bars []bar) {
	const (
		labelW, plotW, rowH, top, pad = 390, 420, 22, 40, 10
	)
	// The scale spans every ratio and target, in whole powers of ten.
	lo, hi := 1.0, 1.0
	for _, b := range bars {
		for _, v := range append(slices.Clone(b.ratios), b.target) {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	x := func(v float64) float64 {
		return labelW + plotW*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	height := top + rowH*len(bars) + 40
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", labelW+plotW+60, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", pad, html.EscapeString(title))
	bottom := top + rowH*len(bars)
	for v := lo; v <= hi*1.0001; v *= 10 {
		for _, m := range []float64{1, 2, 5} {
			t := v * m
			if t > hi*1.0001 {
				break
			}
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/>`+"\n", x(t), x(t), top-4, bottom)
			fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s×</text>`+"\n", x(t), bottom+16, strconv.FormatFloat(t, 'g', 3, 64))
		}
	}
	for i, b := range bars {
		y := top + rowH*i
		m := median(b.ratios)
		color := "#4a7bd0"
		if b.target > 0 {
			if m >= b.target {
				color = "#3a9a5b"
			} else {
				color = "#d0803a"
			}
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+15, html.EscapeString(b.name))
		x0, x1 := x(1), x(m)
		fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", min(x0, x1), y+4, math.Abs(x1-x0), rowH-8, color)
		for _, r := range b.ratios {
			fmt.Fprintf(w, `<circle cx="%.1f" cy="%d" r="2" fill="#222"/>`+"\n", x(r), y+rowH/2)
		}
		if b.target > 0 {
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c00" stroke-width="2"/>`+"\n", x(b.target), x(b.target), y+2, y+rowH-2)
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" fill="#222">%.2f×</text>`+"\n", max(x0, x1)+4, y+15, m)
	}
	fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000"/>`+"\n", x(1), x(1), top-4, bottom)
	legend := "bar: median ratio · dots: each round · red tick: target · green: target met, orange: not met, blue: no target"
	fmt.Fprintf(w, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", pad, height-6, html.EscapeString(legend))
	fmt.Fprintln(w, "</svg>")
}

// writeMarkdown writes one table row per pair: both sides with their
// median rate, every round's ratio, the median ratio and the target.
func writeMarkdown(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	if len(recs) == 0 || len(recs[0]) != 8 || recs[0][0] != "pair" {
		return fmt.Errorf("%s is not a peers CSV", in)
	}
	type row struct {
		rec          []string
		as, bs, rats []float64
	}
	var rows []*row
	idx := map[string]*row{}
	for _, r := range recs[1:] {
		x, ok := idx[r[0]]
		if !ok {
			x = &row{rec: r}
			idx[r[0]] = x
			rows = append(rows, x)
		}
		a, _ := strconv.ParseFloat(r[3], 64)
		b, _ := strconv.ParseFloat(r[5], 64)
		x.as, x.bs = append(x.as, a), append(x.bs, b)
		if r[6] != "" {
			v, _ := strconv.ParseFloat(r[6], 64)
			x.rats = append(x.rats, v)
		}
	}
	var sb strings.Builder
	sb.WriteString("| pair | rheo | rheo /s | peer | peer /s | ratio per round | median | target |\n")
	sb.WriteString("|---|---|--:|---|--:|---|--:|---|\n")
	for _, x := range rows {
		r := x.rec
		target, _ := strconv.ParseFloat(r[7], 64)
		if len(x.rats) == 0 {
			t := "–"
			if target > 0 {
				t = fmt.Sprintf("≥ %.0f/s: %s", target, verdict(median(x.as) >= target))
			}
			fmt.Fprintf(&sb, "| %s | %s | %.0f | – | – | – | – | %s |\n", r[0], r[2], median(x.as), t)
			continue
		}
		per := make([]string, len(x.rats))
		for i, v := range x.rats {
			per[i] = fmt.Sprintf("%.2f", v)
		}
		t := "–"
		if target > 0 {
			t = fmt.Sprintf("≥ %g×: %s", target, verdict(median(x.rats) >= target))
		}
		fmt.Fprintf(&sb, "| %s | %s | %.0f | %s | %.0f | %s | **%.2f×** | %s |\n", r[0], r[2], median(x.as), r[4], median(x.bs),
			strings.Join(per, ", "), median(x.rats), t)
	}
	return os.WriteFile(out, []byte(sb.String()), 0o644)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
