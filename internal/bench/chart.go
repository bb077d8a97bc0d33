package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Layout of the chart: a grid of small charts, one per key figure: bar
// charts for scenarios 1 to 5, then three line charts of scenario 6
// against the number of processes.
const (
	chartRows, chartCols = 4, 3
	chartWidth           = 15 * vg.Inch // 1440 px at chartDPI
	chartHeight          = 14.5 * vg.Inch
	chartDPI             = 96
	captionHeight        = 0.45 * vg.Inch
)

// libColors are the bars' colors, by library: quorumlock stands out, the two
// redsync variants share a hue, the floor is grey.
var libColors = [numLibs]color.RGBA{
	libQuorumlock: {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	libRedsync:    {R: 0xd6, G: 0x61, B: 0x1a, A: 0xff},
	libFailFast:   {R: 0xf4, G: 0xa5, B: 0x5c, A: 0xff},
	libFloor:      {R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff},
}

// panel is one small bar chart: one bar per library, its value written on
// top; the title says which way is better and gives the target, if any.
type panel struct {
	title  string
	names  []string
	values []float64
	format func(float64) string
}

// panels returns the key figures of r, in reading order.
func (r *report) panels() []panel {
	contendedNames := collectNames(r.Contended)
	co := r.Contended
	return []panel{
		{title: fmt.Sprintf("1. uncontended lock+unlock p50, ms (target ≤ %.1f× floor)", maxUncontendedVsFloor), names: r.Names, format: formatPlain,
			values: collect(r.Uncontended, func(l latencyResult) float64 { return ms(l.P50) })},
		{title: "1. uncontended lock+unlock p99, ms", names: r.Names, format: formatPlain,
			values: collect(r.Uncontended, func(l latencyResult) float64 { return ms(l.P99) })},
		{title: fmt.Sprintf("2. lock p50, one node +%v, ms (target ≤ %v)", r.Settings.slowDelay, maxSlowedLockP50), names: r.Names, format: formatPlain,
			values: collect(r.Slowed, func(l latencyResult) float64 { return ms(l.P50) })},
		{title: fmt.Sprintf("3. contended: hand-offs/s (target ≥ %.1f× redsync)", minHandoffsVsRedsync), names: contendedNames, format: formatCount0,
			values: collect(co, func(c contendedResult) float64 { return c.HandoffsPerSec() })},
		{title: fmt.Sprintf("3. contended: idle gap p50, ms (target ≤ %v)", maxIdleGapP50), names: contendedNames, format: formatPlain,
			values: collect(co, func(c contendedResult) float64 { return ms(c.Gap.P50) })},
		{title: fmt.Sprintf("3. contended: wait p99, ms (target ≤ %v)", maxWaitP99), names: contendedNames, format: formatPlain,
			values: collect(co, func(c contendedResult) float64 { return ms(c.Wait.P99) })},
		{title: fmt.Sprintf("3. contended: turns least/busiest (target ≥ %.1f)", minFairness), names: contendedNames, format: formatRatio,
			values: collect(co, func(c contendedResult) float64 { _, _, q := c.Fairness(); return q })},
		{title: fmt.Sprintf("4. distinct names: operations/s (target ≥ %.1f× floor)", minDistinctVsFloor), names: r.Names, format: formatCount0,
			values: collect(r.Distinct, func(t throughputResult) float64 { return t.PerSec() })},
		{title: "5. allocations per lock+unlock (target ≤ redsync)", names: r.Names, format: formatCount1,
			values: collect(r.Allocs, func(a allocResult) float64 { return a.AllocsPerOp })},
	}
}

func collectNames(cs []contendedResult) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// formatPlain formats a value with three significant digits, no unit.
func formatPlain(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// drawChart draws r's key figures as a grid of bar charts, with a caption
// naming the machine, and saves it as a PNG at path.
func drawChart(path string, r *report) error {
	var plots []*plot.Plot
	for _, p := range r.panels() {
		plt, err := p.plot()
		if err != nil {
			return fmt.Errorf("chart %q: %w", p.title, err)
		}
		plots = append(plots, plt)
	}
	procPlots, err := r.procsPlots()
	if err != nil {
		return err
	}
	plots = append(plots, procPlots...)
	grid := make([][]*plot.Plot, chartRows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, chartCols)
	}
	for i, plt := range plots[:min(len(plots), chartRows*chartCols)] {
		grid[i/chartCols][i%chartCols] = plt
	}

	img := vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	caption := draw.TextStyle{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, 15),
		XAlign:  draw.XCenter,
		YAlign:  draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
	dc.FillText(caption, vg.Point{X: chartWidth / 2, Y: chartHeight - 0.12*vg.Inch},
		"quorumlock vs redsync vs raw floor: 5 redis-server nodes, "+r.Machine.String())
	tiles := draw.Tiles{
		Rows: chartRows, Cols: chartCols,
		PadX: 0.35 * vg.Inch, PadY: 0.35 * vg.Inch,
		PadTop: captionHeight, PadBottom: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.25 * vg.Inch,
	}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, plt := range grid[i] {
			if plt != nil {
				plt.Draw(canvases[i][j])
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

// plot builds the panel's bar chart.
func (p panel) plot() (*plot.Plot, error) {
	plt := plot.New()
	plt.Title.Text = p.title
	plt.Title.TextStyle.Font.Size = 12
	plt.X.Tick.Label.Font.Size = 10
	plt.Y.Tick.Label.Font.Size = 10
	plt.Y.Min = 0
	plt.Y.Tick.Marker = plainTicks{}
	top := slices.Max(p.values)
	if top <= 0 || math.IsNaN(top) {
		top = 1
	}
	plt.Y.Max = top * 1.18 // room for the values written above the bars
	plt.Add(plotter.NewGrid())

	for i, v := range p.values {
		bar, err := plotter.NewBarChart(plotter.Values{v}, 0.62*vg.Inch)
		if err != nil {
			return nil, err
		}
		bar.XMin = float64(i)
		bar.Color = libColors[i%numLibs]
		bar.LineStyle.Width = 0
		plt.Add(bar)
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    valuesAt(p.values),
		Labels: collectLabels(p.values, p.format),
	})
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.TextStyle[i].Font.Size = 11
	}
	labels.Offset = vg.Point{Y: 2}
	plt.Add(labels)

	plt.NominalX(tickLabels(p.names)...)
	return plt, nil
}

func valuesAt(values []float64) plotter.XYs {
	xys := make(plotter.XYs, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i), Y: v}
	}
	return xys
}

func collectLabels(values []float64, format func(float64) string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = format(v)
	}
	return out
}

// tickLabels breaks the longer library names in two lines, so that four fit
// side by side: "redsync-failfast" becomes "redsync\nfailfast".
func tickLabels(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		switch {
		case strings.Contains(n, "("):
			out[i] = strings.Replace(n, "(", "\n(", 1)
		case len(n) > 12 && strings.Contains(n, "-"):
			out[i] = strings.Replace(n, "-", "\n", 1)
		default:
			out[i] = n
		}
	}
	return out
}

// plainTicks are gonum's default ticks with labels as short as the values
// allow ("2500", "0.25") instead of a fixed number of decimals.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			// Six significant digits: a tick at 1.2 computed as
			// 1.2000000000000002 is labelled "1.2".
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 6, 64)
		}
	}
	return ticks
}
