package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The picture: a heading over one plot per test, side by side.
const (
	width   = 28 * vg.Centimeter
	height  = 11 * vg.Centimeter
	heading = 1 * vg.Centimeter
	dpi     = 110
)

// Titles of the two plots, and what their axes measure.
const (
	throughputTitle = "stream throughput, client to server"
	latencyTitle    = "p50 round trip, ping-pong"
	sizeLabel       = "message size (bytes)"
	throughputLabel = "MiB/s (log scale)"
	latencyLabel    = "p50 (µs, log scale)"
)

// render draws rep into out, in the format out's extension names.
func render(rep *report, title, out string) error {
	var plots []*plot.Plot
	if s := collect(rep, "stream", func(r result) float64 { return r.Median.BytesPerSec / (1 << 20) }); len(s) > 0 {
		p, err := newPlot(throughputTitle, throughputLabel, s)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if s := collect(rep, "latency", func(r result) float64 { return float64(r.Median.P50Ns) / 1e3 }); len(s) > 0 {
		p, err := newPlot(latencyTitle, latencyLabel, s)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return fmt.Errorf("the report has no stream or latency results")
	}

	var c vg.CanvasWriterTo
	switch ext := strings.ToLower(filepath.Ext(out)); ext {
	case ".svg":
		c = vgsvg.New(width, height)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))}
	case ".pdf":
		c = vgpdf.New(width, height)
	default:
		return fmt.Errorf("%s: unknown picture format %q (svg, png, pdf)", out, ext)
	}
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if title == "" {
		title = describe(rep)
	}
	sty := text.Style{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, 13),
		XAlign:  draw.XCenter,
		YAlign:  draw.YCenter,
		Handler: plot.DefaultTextHandler,
	}
	dc.FillText(sty, vg.Point{X: width / 2, Y: height - heading/2}, title)
	body := draw.Crop(dc, 0, 0, 0, -heading)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Centimeter / 2, PadLeft: vg.Centimeter / 4,
		PadRight: vg.Centimeter / 2, PadBottom: vg.Centimeter / 4}
	for i, p := range plots {
		p.Draw(tiles.At(body, i, 0))
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	return f.Close()
}

// newPlot draws each series as a line with points against message size,
// both axes on log scales: sizes grow by powers of two, and throughput and
// latency span decades between 64 B and megabytes. Both rise with size, so
// the legend goes top left, where the curves are not.
func newPlot(title, yLabel string, ss []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = sizeLabel
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	var sizes []int
	var lines []any
	for _, s := range ss {
		xys := make(plotter.XYs, len(s.sizes))
		for i := range s.sizes {
			xys[i] = plotter.XY{X: float64(s.sizes[i]), Y: s.ys[i]}
		}
		sizes = append(sizes, s.sizes...)
		lines = append(lines, s.name, xys)
	}
	p.X.Tick.Marker = sizeTicks(sizes)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks{}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*3, -vg.Millimeter*2 // inset from the corner
	return p, nil
}

// decadeTicks marks 1, 2 and 5 times each power of ten with a label, and
// the other digits without: plot.LogTicks labels powers of ten only, which
// leaves one label or none on a range such as 30 to 700.
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max < min {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for d := 1; d <= 9; d++ {
			v := float64(d) * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if d == 1 || d == 2 || d == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// sizeTicks marks the measured sizes, in rdmaperf's notation (64, 4K, 1M).
type sizeTicks []int

func (s sizeTicks) Ticks(min, max float64) []plot.Tick {
	seen := map[int]bool{}
	var ticks []plot.Tick
	for _, n := range s {
		if seen[n] || float64(n) < min || float64(n) > max {
			continue
		}
		seen[n] = true
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: sizeText(n)})
	}
	return ticks
}

func sizeText(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "G"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// describe is the default heading: what was run, where, how often.
func describe(rep *report) string {
	s := fmt.Sprintf("rdmaperf %s, server %s, P=%d", rep.Mode, rep.Server, rep.Parallel)
	if rep.Rounds > 1 {
		s += fmt.Sprintf(", median of %d rounds", rep.Rounds)
	}
	return s + fmt.Sprintf(" (%s, %d CPUs)", rep.GoVersion, rep.CPUs)
}
