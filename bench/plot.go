package main

import (
	"fmt"
	"image/color"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colP50   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colP99   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colMin   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colMax   = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colLine  = color.Gray{Y: 0x99}
	colEven  = color.Gray{Y: 0x55}
	colGroup = color.Gray{Y: 0xdd}
)

// plotContention draws two panels, one row per library of the contention
// scenario: handoff latency (p50 and p99, median over rounds, log scale)
// and fairness (the fewest and most acquisitions of one goroutine, as a
// share of all acquisitions, in the least even round), and writes them to
// path as a PNG.
func plotContention(s *Summary, path string) error {
	rows := s.Contention
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	labels := make([]string, n)
	// Row 0 is drawn at the bottom: list the libraries top down.
	y := func(i int) float64 { return float64(n - 1 - i) }
	for i, r := range rows {
		labels[n-1-i] = fmt.Sprintf("%s  %s  [%.0f handoffs/s]", shortGroup(r.Target.Group), labelOf(r.Target), r.Handoffs.Median)
	}

	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("Handoff latency, %d goroutines on one key", s.Config.Contenders)
	lat.X.Label.Text = "ms from release to the next goroutine's lock (log scale)"
	lat.X.Scale = plot.LogScale{}
	lat.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.NominalY(labels...)
	lat.Legend.Left = true
	var p50, p99 plotter.XYs
	lo, hi := 1e9, 0.0
	for i, r := range rows {
		if r.HandoffP50Us.N == 0 {
			continue
		}
		a, b := r.HandoffP50Us.Median/1000, r.HandoffP99Us.Median/1000
		p50 = append(p50, plotter.XY{X: a, Y: y(i)})
		p99 = append(p99, plotter.XY{X: b, Y: y(i)})
		lo, hi = min(lo, a), max(hi, b)
	}
	lat.X.Min, lat.X.Max = lo/1.5, hi*1.5
	if err := groupBands(lat, rows, y); err != nil {
		return err
	}
	for i := range p50 {
		if err := segment(lat, p50[i].X, p99[i].X, p50[i].Y); err != nil {
			return err
		}
	}
	if err := dots(lat, p50, colP50, draw.CircleGlyph{}, "p50 (median over rounds)"); err != nil {
		return err
	}
	if err := dots(lat, p99, colP99, draw.TriangleGlyph{}, "p99"); err != nil {
		return err
	}
	lat.Add(plotter.NewGrid())

	fair := plot.New()
	fair.Title.Text = "Fairness: acquisitions per goroutine (least even round)"
	fair.X.Label.Text = "% of the round's acquisitions (an even split is the dashed line)"
	fair.NominalY(make([]string, n)...)
	fair.Legend.Left = true
	fair.X.Min, fair.X.Max = 0, 100
	var mins, maxs plotter.XYs
	for i, r := range rows {
		total := float64(sumOf(r, s))
		if total == 0 {
			continue
		}
		mins = append(mins, plotter.XY{X: 100 * float64(r.WorstMin) / total, Y: y(i)})
		maxs = append(maxs, plotter.XY{X: 100 * float64(r.WorstMax) / total, Y: y(i)})
	}
	if err := groupBands(fair, rows, y); err != nil {
		return err
	}
	for i := range mins {
		if err := segment(fair, mins[i].X, maxs[i].X, mins[i].Y); err != nil {
			return err
		}
	}
	even := 100 / float64(s.Config.Contenders)
	l, err := plotter.NewLine(plotter.XYs{{X: even, Y: -0.5}, {X: even, Y: float64(n) - 0.5}})
	if err != nil {
		return err
	}
	l.Color, l.Dashes, l.Width = colEven, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
	fair.Add(l)
	if err := dots(fair, mins, colMin, draw.CircleGlyph{}, "fewest of a goroutine"); err != nil {
		return err
	}
	if err := dots(fair, maxs, colMax, draw.TriangleGlyph{}, "most of a goroutine"); err != nil {
		return err
	}
	fair.Add(plotter.NewGrid())

	for _, p := range []*plot.Plot{lat, fair} {
		p.Title.TextStyle.Font.Size = vg.Points(13)
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(11)
		p.X.Label.TextStyle.Font.Size = vg.Points(11)
		p.Y.Tick.Label.Font.Size = vg.Points(11)
		p.X.Tick.Label.Font.Size = vg.Points(10)
		p.Y.Min, p.Y.Max = -0.5, float64(n)+0.3 // room for the legend above the first row
	}
	img := vgimg.NewWith(vgimg.UseWH(15*vg.Inch, vg.Length(2.2+0.42*float64(n))*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 6}
	canvases := plot.Align([][]*plot.Plot{{lat, fair}}, t, dc)
	lat.Draw(canvases[0][0])
	fair.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sumOf is the number of acquisitions in r's least even round.
func sumOf(r ContSummary, s *Summary) int {
	best := -1.0
	total := 0
	for _, rd := range s.full.Rounds {
		x, ok := rd.Contention[r.Target.ID]
		if !ok {
			continue
		}
		if f := fairness(x.Min(), x.Max()); best < 0 || f < best {
			best, total = f, x.Acquisitions
		}
	}
	return total
}

func segment(p *plot.Plot, a, b, y float64) error {
	l, err := plotter.NewLine(plotter.XYs{{X: a, Y: y}, {X: b, Y: y}})
	if err != nil {
		return err
	}
	l.Color, l.Width = colLine, vg.Points(2)
	p.Add(l)
	return nil
}

func dots(p *plot.Plot, xys plotter.XYs, c color.Color, shape draw.GlyphDrawer, name string) error {
	if len(xys) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	s.GlyphStyle.Color, s.GlyphStyle.Shape, s.GlyphStyle.Radius = c, shape, vg.Points(5)
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}

// groupBands shades every other group of servers, so that the rows of one
// group read together.
func groupBands(p *plot.Plot, rows []ContSummary, y func(int) float64) error {
	shade := false
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].Target.Group == rows[i].Target.Group {
			j++
		}
		if shade {
			top, bottom := y(i)+0.5, y(j-1)-0.5
			xmin, xmax := p.X.Min, p.X.Max
			poly, err := plotter.NewPolygon(plotter.XYs{{X: xmin, Y: bottom}, {X: xmax, Y: bottom}, {X: xmax, Y: top}, {X: xmin, Y: top}})
			if err != nil {
				return err
			}
			poly.Color, poly.LineStyle.Width = colGroup, 0
			p.Add(poly)
		}
		shade = !shade
		i = j
	}
	return nil
}

// shortGroup is a group's name in the plot's row labels.
func shortGroup(g string) string {
	switch g {
	case groupRedis:
		return "Redis ×1"
	case groupRedlock:
		return "Redis ×5"
	case groupEtcd:
		return "etcd"
	}
	return strings.Fields(g)[0]
}
