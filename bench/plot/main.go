// Command plot draws the scale curves of `switchyard bench --scale` as one
// PNG: a panel per curve, each figure relative to its value at the
// curve's first point, with the band a flat curve stays in (1/1.2 to
// 1.2). It reads the bench's `name value unit` lines (other lines are
// ignored), so a saved run can be drawn again:
//
//	switchyard bench --scale | tee scale.txt
//	go run . -o scale.png < scale.txt
//
// It is a module of its own so that the product does not depend on the
// plotting library.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// flatBand is the spread a flat curve stays within, as the bench judges it.
const flatBand = 1.2

// shown are the figures a panel draws, in this order, where a curve has
// them; jobs/s gives way to efficiency on the leases curve, whose rate
// grows with its x by design.
var shown = []string{"jobs_per_s", "efficiency", "claim_ms_p99", "ingest_copy_ratio"}

var figureLine = regexp.MustCompile(`^scale_([a-z]+)_([0-9]+)_([a-z0-9_]+) ([0-9.eE+-]+) (\S+)$`)

// point is one figure at one x of a curve.
type point struct {
	x     float64
	value float64
}

// curve holds a curve's figures by metric, in the order they were read.
type curve struct {
	name    string
	metrics []string
	points  map[string][]point
	units   map[string]string
}

func main() {
	out := flag.String("o", "scale.png", "the PNG to write")
	flag.Parse()
	curves, err := parse(os.Stdin)
	if err == nil {
		err = render(curves, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// parse reads the scale figures, keeping the curves in the order met.
func parse(r io.Reader) ([]*curve, error) {
	var curves []*curve
	byName := map[string]*curve{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := figureLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		x, _ := strconv.ParseFloat(m[2], 64)
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", sc.Text(), err)
		}
		c := byName[m[1]]
		if c == nil {
			c = &curve{name: m[1], points: map[string][]point{}, units: map[string]string{}}
			byName[m[1]] = c
			curves = append(curves, c)
		}
		if _, ok := c.points[m[3]]; !ok {
			c.metrics = append(c.metrics, m[3])
		}
		c.points[m[3]] = append(c.points[m[3]], point{x, v})
		c.units[m[3]] = m[5]
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(curves) == 0 {
		return nil, errors.New("no scale figures in the input (lines like `scale_queues_1_jobs_per_s 123 jobs/s`)")
	}
	return curves, nil
}

// render lays the panels out two to a row and writes the PNG.
func render(curves []*curve, path string) error {
	const cols = 2
	rows := (len(curves) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, c := range curves {
		p, err := panel(c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		plots[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(900), vg.Points(float64(280*rows)))
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(24), PadY: vg.Points(24),
		PadTop: vg.Points(12), PadBottom: vg.Points(12), PadLeft: vg.Points(12), PadRight: vg.Points(12)}, dc)
	for i := range plots {
		for j, p := range plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// panel draws one curve: each shown figure over its first value, the
// flat band dashed, x on a log scale where every x is positive.
func panel(c *curve) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.name
	p.Y.Label.Text = "× the first point"
	p.Legend.Top, p.Legend.Left = true, true
	var xs []float64
	for _, metric := range c.metrics {
		if !slices.Contains(shown, metric) || (metric == "jobs_per_s" && slices.Contains(c.metrics, "efficiency")) {
			continue
		}
		pts := c.points[metric]
		if pts[0].value == 0 {
			return nil, fmt.Errorf("%s is 0 at the first point: nothing to compare with", metric)
		}
		xy := make(plotter.XYs, len(pts))
		for k, pt := range pts {
			xy[k] = plotter.XY{X: pt.x, Y: pt.value / pts[0].value}
			if !slices.Contains(xs, pt.x) {
				xs = append(xs, pt.x)
			}
		}
		line, marks, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		line.Color = palette[slices.Index(shown, metric)%len(palette)] // a figure has one colour in every panel
		marks.Color = line.Color
		p.Add(line, marks)
		p.Legend.Add(fmt.Sprintf("%s (%s %s at %s)", metric, short(pts[0].value), c.units[metric], short(pts[0].x)), line)
	}
	if len(xs) == 0 {
		return nil, errors.New("none of its figures is one a panel shows")
	}
	slices.Sort(xs)
	for _, y := range []float64{flatBand, 1 / flatBand} {
		band, err := plotter.NewLine(plotter.XYs{{X: xs[0], Y: y}, {X: xs[len(xs)-1], Y: y}})
		if err != nil {
			return nil, err
		}
		band.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		band.Color = color.Gray{Y: 150}
		p.Add(band)
	}
	if xs[0] > 0 {
		p.X.Scale = plot.LogScale{}
	}
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: short(x)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min = min(p.Y.Min, 0.5)
	p.Y.Max = max(p.Y.Max, 1.5)
	return p, nil
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

// short writes 1000000 as 1M, 10000 as 10k, 1.234 as 1.23.
func short(v float64) string {
	switch {
	case v >= 1e6 && v == float64(int64(v/1e6))*1e6:
		return fmt.Sprintf("%.0fM", v/1e6)
	case v >= 1e3 && v == float64(int64(v/1e3))*1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
