package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChart(t *testing.T) {
	in := filepath.Join(t.TempDir(), "peers.csv")
	csv := "pair,round,rheo,rheo_per_s,peer,peer_per_s,ratio,target\n" +
		"a vs b,1,rheo x,2000,peer y,1000,2.000,2\n" +
		"a vs b,2,rheo x,3000,peer y,1000,3.000,2\n" +
		"c vs d,1,rheo x,500,peer z,1000,0.500,0\n" +
		"memory,1,rheo m,900000,,0,,1000000\n"
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	bars, err := read(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(bars) != 2 || median(bars[0].ratios) != 2.5 || median(bars[1].ratios) != 0.5 {
		t.Fatalf("bars %+v, want a vs b at 2.5× and c vs d at 0.5× (the absolute row left out)", bars)
	}
	var svg bytes.Buffer
	render(&svg, "t", bars)
	s := svg.String()
	for _, want := range []string{"<svg", "a vs b", "2.50×", "0.50×", "#3a9a5b", "</svg>"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if err := os.WriteFile(in, []byte("x,y\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := read(in); err == nil || !strings.Contains(err.Error(), "not a peers CSV") {
		t.Errorf("read of a foreign CSV: %v, want an error naming it", err)
	}
}

func TestMarkdown(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "peers.csv"), filepath.Join(dir, "peers.md")
	csv := "pair,round,rheo,rheo_per_s,peer,peer_per_s,ratio,target\n" +
		"a vs b,1,rheo x,2000,peer y,1000,2.000,2\n" +
		"a vs b,2,rheo x,1000,peer y,1000,1.000,2\n" +
		"memory,1,rheo m,900000,,0,,1000000\n"
	if err := os.WriteFile(in, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeMarkdown(in, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| a vs b | rheo x | 1500 | peer y | 1000 | 2.00, 1.00 | **1.50×** | ≥ 2×: not met |",
		"| memory | rheo m | 900000 | – | – | – | – | ≥ 1000000/s: not met |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, b)
		}
	}
}
