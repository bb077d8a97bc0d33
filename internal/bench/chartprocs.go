package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// loadColors are the line colors of the load libraries, those of the bars.
var loadColors = [numLoadLibs]color.RGBA{
	loadQuorumlock: libColors[libQuorumlock],
	loadRedsync:    libColors[libRedsync],
}

// procsPlots returns the line charts of scenario 6 against the number of
// processes, one line per library: hand-offs/s, wait p99 and
// least/busiest worker turns. None if
// scenario 6 did not run.
func (r *report) procsPlots() ([]*plot.Plot, error) {
	if len(r.Procs) != numLoadLibs {
		return nil, nil
	}
	handoffs, err := r.procsPlot(fmt.Sprintf("6. processes: hand-offs/s vs processes (target ≥ %.1f× redsync)", minProcsVsRedsync),
		func(p procsResult) float64 { return p.HandoffsPerSec() })
	if err != nil {
		return nil, err
	}
	waits, err := r.procsPlot(fmt.Sprintf("6. processes: wait p99, ms, vs processes (target ≤ %v)", maxWaitP99),
		func(p procsResult) float64 { return ms(p.Wait.P99) })
	if err != nil {
		return nil, err
	}
	fairness, err := r.procsPlot(fmt.Sprintf("6. processes: turns least/busiest vs processes (target ≥ %.1f)", minProcsFairness),
		func(p procsResult) float64 { _, _, q := p.Fairness(); return q })
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{handoffs, waits, fairness}, nil
}

// procsPlot draws value against the number of processes, one line with
// points per library, with a legend.
func (r *report) procsPlot(title string, value func(procsResult) float64) (*plot.Plot, error) {
	plt := plot.New()
	plt.Title.Text = title
	plt.Title.TextStyle.Font.Size = 12
	plt.X.Label.Text = "contender processes (16 workers in all)"
	plt.X.Tick.Label.Font.Size = 10
	plt.Y.Tick.Label.Font.Size = 10
	plt.Y.Min = 0
	plt.Y.Tick.Marker = plainTicks{}
	plt.X.Tick.Marker = processTicks(r.Settings.procCounts)
	plt.Add(plotter.NewGrid())
	plt.Legend.Top = true
	top := 0.0
	for lib := range numLoadLibs {
		xys := make(plotter.XYs, len(r.Procs[lib]))
		for i, p := range r.Procs[lib] {
			xys[i] = plotter.XY{X: float64(p.Procs), Y: value(p)}
			top = max(top, xys[i].Y)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color = loadColors[lib]
		line.Width = vg.Points(2)
		points.Color = loadColors[lib]
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3)
		plt.Add(line, points)
		plt.Legend.Add(loadNames[lib], line, points)
	}
	if top <= 0 {
		top = 1
	}
	plt.Y.Max = top * 1.25 // room for the legend
	return plt, nil
}

// processTicks labels the numbers of processes measured, nothing else.
type processTicks []int

func (t processTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, p := range t {
		ticks = append(ticks, plot.Tick{Value: float64(p), Label: fmt.Sprint(p)})
	}
	return ticks
}
