package main

import (
	"encoding/xml"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// testdata/rdmaperf.json is `rdmaperf -provider soft -loopback -sizes
// 64,1K,16K,64K,1M -n 300 -rounds 1 -json-file ...`: stream and latency at
// five sizes over rdma (soft) and tcp.

func TestCollect(t *testing.T) {
	rep := sample(t)
	ss := collect(rep, "stream", func(r result) float64 { return r.Median.BytesPerSec })
	if len(ss) != 2 || ss[0].name != "rdma (soft)" || ss[1].name != "tcp" {
		t.Fatalf("series %+v, want rdma (soft) and tcp", ss)
	}
	for _, s := range ss {
		if fmt.Sprint(s.sizes) != "[64 1024 16384 65536 1048576]" {
			t.Errorf("%s: sizes %v", s.name, s.sizes)
		}
	}
	// Each point is the median of its own result, at its own size.
	for _, r := range rep.Results {
		if r.Test != "stream" {
			continue
		}
		s := ss[0]
		if r.Transport == "tcp" {
			s = ss[1]
		}
		found := false
		for i, n := range s.sizes {
			if n == r.Size {
				found = true
				if s.ys[i] != r.Median.BytesPerSec {
					t.Errorf("%s at %d: %v, want %v", s.name, n, s.ys[i], r.Median.BytesPerSec)
				}
			}
		}
		if !found {
			t.Errorf("%s: no point at %d", s.name, r.Size)
		}
	}
	// Reports list sizes in any order; lines go left to right.
	rev := *rep
	rev.Results = nil
	for i := len(rep.Results) - 1; i >= 0; i-- {
		rev.Results = append(rev.Results, rep.Results[i])
	}
	for _, s := range collect(&rev, "latency", func(r result) float64 { return float64(r.Median.P50Ns) }) {
		if fmt.Sprint(s.sizes) != "[64 1024 16384 65536 1048576]" {
			t.Errorf("%s from a reversed report: sizes %v", s.name, s.sizes)
		}
	}
}

// The SVG is well-formed and holds both plots, both series in the legend
// and in their colours, and the size ticks.
func TestRenderSVG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "perf.svg")
	if err := render(sample(t), "", out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var texts []string
	styles := map[string]int{}
	root := ""
	dec := xml.NewDecoder(f)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				if a.Name.Local == "style" {
					styles[a.Value]++
				}
			}
			if se.Name.Local == "text" {
				var s string
				if err := dec.DecodeElement(&s, &se); err != nil {
					t.Fatal(err)
				}
				texts = append(texts, strings.TrimSpace(s))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	have := map[string]int{}
	for _, s := range texts {
		have[s]++
	}
	for _, want := range []string{throughputTitle, latencyTitle, throughputLabel, latencyLabel,
		"rdma (soft)", "tcp", "64", "1K", "16K", "64K", "1M",
		"rdmaperf loopback, server in-process, P=1 (go1.26.8, 2 CPUs)"} {
		if have[want] == 0 {
			t.Errorf("no text %q in the SVG; texts: %q", want, texts)
		}
	}
	// A legend entry per series in each of the two plots.
	if have["rdma (soft)"] != 2 || have["tcp"] != 2 {
		t.Errorf("legend entries: rdma (soft) %d, tcp %d; want 2 each", have["rdma (soft)"], have["tcp"])
	}
	// Each series is drawn in its own colour: 5 points in each plot, at least.
	for i, name := range []string{"rdma (soft)", "tcp"} {
		r, g, b, _ := plotutil.Color(i).RGBA()
		hex := fmt.Sprintf("stroke:#%02X%02X%02X", r>>8, g>>8, b>>8)
		n := 0
		for s, c := range styles {
			if strings.Contains(s, hex) {
				n += c
			}
		}
		if n < 2*5 {
			t.Errorf("%s: %d shapes in %s, want at least 10 (5 sizes x 2 plots)", name, n, hex)
		}
	}
}

// The PNG decodes, has the picture's size, and shows both series' colours.
func TestRenderPNG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "perf.png")
	if err := render(sample(t), "a title", out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	b := img.Bounds()
	wantW, wantH := int(width.Dots(dpi)+0.5), int(height.Dots(dpi)+0.5)
	if b.Dx() != wantW || b.Dy() != wantH {
		t.Errorf("%dx%d pixels, want %dx%d", b.Dx(), b.Dy(), wantW, wantH)
	}
	for i, name := range []string{"rdma (soft)", "tcp"} {
		if n := countColor(img, plotutil.Color(i)); n < 50 {
			t.Errorf("%s: %d pixels of its colour, want a line's worth", name, n)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	if err := render(sample(t), "", filepath.Join(dir, "perf.gif")); err == nil {
		t.Error("an unknown extension was accepted")
	}
	if _, err := readReport(strings.NewReader(`{"tool":"iperf3","results":[{}]}`)); err == nil {
		t.Error("a report of another tool was accepted")
	}
	if _, err := readReport(strings.NewReader(`{"tool":"rdmaperf","results":[]}`)); err == nil {
		t.Error("an empty report was accepted")
	}
	if err := render(&report{Tool: "rdmaperf", Results: []result{{Test: "other"}}}, "", filepath.Join(dir, "x.svg")); err == nil {
		t.Error("a report without stream or latency results was drawn")
	}
}

func sample(t *testing.T) *report {
	t.Helper()
	f, err := os.Open("testdata/rdmaperf.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := readReport(f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func countColor(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) int {
	cr, cg, cb, _ := c.RGBA()
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == cr>>8 && g>>8 == cg>>8 && bl>>8 == cb>>8 {
				n++
			}
		}
	}
	return n
}
