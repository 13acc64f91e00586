package main

// The latency CDF picture: one line per forwarder from the continuous
// ping-pong full logs. Left: the CDF; right: the tail (1 - CDF, log scale).

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one forwarder's latencies (usec).
type Series struct {
	Name string
	Lat  []float64
}

// writeCDF draws the CDF and its tail side by side into a PNG.
func writeCDF(path, title string, series []Series) error {
	cdf, tail := plot.New(), plot.New()
	cdf.Title.Text = "TCP ping-pong latency CDF"
	tail.Title.Text = "tail: fraction of requests slower than x"
	for _, p := range []*plot.Plot{cdf, tail} {
		p.X.Label.Text = "one-way latency (us, log scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
	}
	cdf.Y.Label.Text = "fraction of requests"
	cdf.Y.Min, cdf.Y.Max = 0, 1
	var ticks []plot.Tick
	for i := 0; i <= 10; i++ {
		ticks = append(ticks, plot.Tick{Value: float64(i) / 10, Label: fmt.Sprintf("%.1f", float64(i)/10)})
	}
	cdf.Y.Tick.Marker = plot.ConstantTicks(ticks)
	tail.Y.Label.Text = "1 - CDF (log scale)"
	tail.Y.Scale = plot.LogScale{}
	tail.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	legend := plot.NewLegend() // drawn beside the plots, never over a line
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = 0.5 * vg.Inch
	legend.Padding = vg.Points(6)
	legend.TextStyle.Font.Size = vg.Points(12)

	drawn := 0
	for i, s := range series {
		xs, fs := cdfPoints(positive(s.Lat), 2000, 300)
		if len(xs) == 0 {
			continue
		}
		n := float64(len(s.Lat))
		pc, pt := make(plotter.XYs, len(xs)), make(plotter.XYs, len(xs))
		for j := range xs {
			pc[j] = plotter.XY{X: xs[j], Y: fs[j]}
			// 1 - F, counting the point itself as slower so the last one stays > 0.
			pt[j] = plotter.XY{X: xs[j], Y: math.Max(1-fs[j]+1/n, 1/n)}
		}
		for k, pts := range []plotter.XYs{pc, pt} {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = lineColor(i)
			l.Width = vg.Points(1.6)
			l.Dashes = plotutil.Dashes(i % 4)
			if k == 0 {
				cdf.Add(l)
				legend.Add(fmt.Sprintf("%s (p50 %.0f us)", s.Name, quantile(s.Lat, 0.5)), l)
			} else {
				tail.Add(l)
			}
		}
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("no latency data to plot")
	}

	const w, h, lw = 16 * vg.Inch, 6 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	top := draw.Crop(dc, 0, -lw, 0, -0.35*vg.Inch)
	legend.Draw(draw.Crop(dc, w-lw, 0, 0, -1*vg.Inch))
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.3 * vg.Inch, PadTop: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.2 * vg.Inch}
	cdf.Draw(t.At(top, 0, 0))
	tail.Draw(t.At(top, 1, 0))
	dc.FillText(draw.TextStyle{Color: color.Black, Font: cdf.Title.TextStyle.Font, Handler: cdf.Title.TextStyle.Handler, XAlign: draw.XCenter},
		vg.Point{X: w / 2, Y: h - 0.25*vg.Inch}, title)
	png := vgimg.PngCanvas{Canvas: img}
	return savePNG(path, png)
}

// Colours that stay apart on white, one per forwarder.
func lineColor(i int) color.Color {
	palette := []color.RGBA{
		{0, 0, 0, 255},       // black
		{214, 39, 40, 255},   // red
		{31, 119, 180, 255},  // blue
		{44, 160, 44, 255},   // green
		{255, 127, 14, 255},  // orange
		{148, 103, 189, 255}, // purple
		{140, 86, 75, 255},   // brown
		{23, 190, 207, 255},  // cyan
	}
	return palette[i%len(palette)]
}

func positive(v []float64) []float64 {
	out := make([]float64, 0, len(v))
	for _, x := range v {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// quantile of unsorted data (nearest rank).
func quantile(v []float64, q float64) float64 {
	xs, fs := cdfPoints(v, 0, 0)
	for i := range xs {
		if fs[i] >= q {
			return xs[i]
		}
	}
	return math.NaN()
}

func savePNG(path string, c vgimg.PngCanvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
