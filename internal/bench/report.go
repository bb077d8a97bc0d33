package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
)

// Markers around the part of docs/benchmarks.md that the program rewrites;
// the prose around them is left as it is.
const (
	beginMarker = "<!-- results:begin -->"
	endMarker   = "<!-- results:end -->"
)

// report is everything one run measured. Every slice of results is in the
// order of the lib* constants.
type report struct {
	Machine     machine
	Settings    settings
	Names       []string // library names
	Uncontended []latencyResult
	// UncontendedNew is scenario 1 again with a new lock object per call.
	UncontendedNew []latencyResult
	Slowed         []latencyResult
	Contended      []contendedResult
	Distinct       []throughputResult
	Allocs         []allocResult
	Procs          [][]procsResult // [load library][settings.procCounts index]
	Waiters        []waitersResult // by load library
	Bursts         [][]burstResult // [load library][settings.bursts index]
	Leases         []leaseResult   // quorumlock only
	RenewFloor     float64         // raw renewal scripts/s the nodes serve
	Primitives     []latencyResult // scenario 10, by primitive (primMutex, ...)
	Semaphore      procsResult     // scenario 11; Procs is 0 when it did not run
	FirstLock      []latencyResult // scenario 12, by firstQuorumlock, ...
	Took           time.Duration   // the whole run, servers started
}

// figure is one measured quantity, one value per library.
type figure struct {
	Name   string
	Values []float64
	Format func(float64) string
}

// section is one scenario's table.
type section struct {
	Title   string
	What    string
	Columns []string // library names as they ran
	Figures []figure
}

// sections returns the tables of r, one per scenario.
func (r *report) sections() []section {
	s := r.Settings
	contendedNames := make([]string, len(r.Contended))
	for i, c := range r.Contended {
		contendedNames[i] = c.Name
	}
	return []section{
		{
			Title: "1. Uncontended lock+unlock",
			What: fmt.Sprintf("%d sequential lock+unlock per library on a name of its own, in turns of %d, timed together; "+
				"then as many again, each on a new lock object (rs.NewMutex(name) for quorumlock), its making timed too.", s.iterations, s.chunk),
			Columns: r.Names,
			Figures: withFailures([]figure{
				latencyFigure("lock+unlock p50", r.Uncontended, func(l latencyResult) float64 { return ms(l.P50) }),
				latencyFigure("lock+unlock p99", r.Uncontended, func(l latencyResult) float64 { return ms(l.P99) }),
				latencyFigure("new lock, lock+unlock p50", r.UncontendedNew, func(l latencyResult) float64 { return ms(l.P50) }),
				latencyFigure("new lock, lock+unlock p99", r.UncontendedNew, func(l latencyResult) float64 { return ms(l.P99) }),
			}, "failed calls", addCounts(failureCounts(r.Uncontended), failureCounts(r.UncontendedNew))),
		},
		{
			Title: fmt.Sprintf("2. One node slowed by %v", s.slowDelay),
			What: fmt.Sprintf("%d sequential Lock per library (Unlock untimed), node 0 reached through a toxiproxy latency of %v on its replies.",
				s.slowIterations, s.slowDelay),
			Columns: r.Names,
			Figures: withFailures([]figure{
				latencyFigure("lock p50", r.Slowed, func(l latencyResult) float64 { return ms(l.P50) }),
				latencyFigure("lock p99", r.Slowed, func(l latencyResult) float64 { return ms(l.P99) }),
			}, "failed calls", failureCounts(r.Slowed)),
		},
		{
			Title: fmt.Sprintf("3. %d workers contending for one name", s.workers),
			What: fmt.Sprintf("Each worker: Lock (%v ctx) → hold %v → Unlock → pause %v; %s of %v per library.",
				s.lockTimeout, s.hold, s.pause, plural(s.rounds, "run"), s.contendedFor),
			Columns: contendedNames,
			Figures: r.contendedFigures(),
		},
		{
			Title: "4. Distinct names",
			What: fmt.Sprintf("%d goroutines per library, each lock+unlock in a loop on a name of its own, %v per library in turns of at most %v.",
				s.distinctGoes, s.distinctFor, s.distinctTurn),
			Columns: r.Names,
			Figures: withFailures([]figure{{
				Name:   "operations/s",
				Values: collect(r.Distinct, func(t throughputResult) float64 { return t.PerSec() }),
				Format: formatRate,
			}}, "failed calls", collect(r.Distinct, func(t throughputResult) float64 { return float64(t.Errors.N) })),
		},
		{
			Title:   "5. Allocations per lock+unlock",
			What:    fmt.Sprintf("testing.Benchmark with b.ReportAllocs, uncontended, one name per library; mean of %s per library.", plural(s.rounds, "run")),
			Columns: r.Names,
			Figures: []figure{
				{Name: "allocs/op", Values: collect(r.Allocs, func(a allocResult) float64 { return a.AllocsPerOp }), Format: formatCount1},
				{Name: "B/op", Values: collect(r.Allocs, func(a allocResult) float64 { return a.BytesPerOp }), Format: formatBytes},
				{Name: "time/op", Values: collect(r.Allocs, func(a allocResult) float64 { return a.NsPerOp / 1e6 }), Format: formatMS},
			},
		},
	}
}

func (r *report) contendedFigures() []figure {
	c := r.Contended
	fairness := func(pick func(least, busiest int, ratio float64) float64) []float64 {
		return collect(c, func(x contendedResult) float64 { return pick(x.Fairness()) })
	}
	figs := []figure{
		{Name: "hand-offs/s", Values: collect(c, func(x contendedResult) float64 { return x.HandoffsPerSec() }), Format: formatRate},
		{Name: "idle gap p50", Values: collect(c, func(x contendedResult) float64 { return ms(x.Gap.P50) }), Format: formatMS},
		{Name: "idle gap p99", Values: collect(c, func(x contendedResult) float64 { return ms(x.Gap.P99) }), Format: formatMS},
		{Name: "wait p50", Values: collect(c, func(x contendedResult) float64 { return ms(x.Wait.P50) }), Format: formatMS},
		{Name: "wait p99", Values: collect(c, func(x contendedResult) float64 { return ms(x.Wait.P99) }), Format: formatMS},
		{Name: "turns, least busy worker", Values: fairness(func(l, _ int, _ float64) float64 { return float64(l) }), Format: formatCount0},
		{Name: "turns, busiest worker", Values: fairness(func(_, b int, _ float64) float64 { return float64(b) }), Format: formatCount0},
		{Name: "least/busiest", Values: fairness(func(_, _ int, q float64) float64 { return q }), Format: formatRatio},
		{Name: "failed Lock calls", Values: collect(c, func(x contendedResult) float64 { return float64(x.Failed.N) }), Format: formatCount0},
		{Name: "overlaps", Values: collect(c, func(x contendedResult) float64 { return float64(x.Overlaps) }), Format: formatCount0},
	}
	return withFailures(figs, "failed Unlock calls", collect(c, func(x contendedResult) float64 { return float64(x.UnlockFailed.N) }))
}

// withFailures appends a row of failure counts when any is non-zero.
func withFailures(figs []figure, name string, counts []float64) []figure {
	for _, n := range counts {
		if n != 0 {
			return append(figs, figure{Name: name, Values: counts, Format: formatCount0})
		}
	}
	return figs
}

func latencyFigure(name string, rs []latencyResult, pick func(latencyResult) float64) figure {
	return figure{Name: name, Values: collect(rs, pick), Format: formatMS}
}

func failureCounts(rs []latencyResult) []float64 {
	return collect(rs, func(l latencyResult) float64 { return float64(l.Errors.N) })
}

// addCounts returns a+b, element by element.
func addCounts(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(b) {
			out[i] += b[i]
		}
	}
	return out
}

func collect[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func formatRate(v float64) string   { return fmt.Sprintf("%.0f/s", v) }
func formatCount0(v float64) string { return fmt.Sprintf("%.0f", v) }
func formatCount1(v float64) string { return fmt.Sprintf("%.1f", v) }
func formatRatio(v float64) string  { return fmt.Sprintf("%.2f", v) }
func formatBytes(v float64) string  { return fmt.Sprintf("%.0f B", v) }

// ratio formats v/ref with two significant digits or two decimals
// ("0.93×", "0.0045×", "71×"). ref must not be 0.
func ratio(v, ref float64) string {
	switch q := v / ref; {
	case q != 0 && q < 0.1:
		return fmt.Sprintf("%.2g×", q)
	case q >= 10:
		return fmt.Sprintf("%.0f×", q)
	default:
		return fmt.Sprintf("%.2f×", q)
	}
}

// markdown returns the generated part of docs/benchmarks.md, without the
// markers.
func (r *report) markdown(chartFile string, checks []check) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n_Generated by `%s`; do not edit between the markers, run it again._\n\n", r.Settings.command())
	fmt.Fprintf(&b, "**Machine:** %s; 1-minute load average %s when the run started. Five `redis-server` nodes on 127.0.0.1 started by the program, without persistence; "+
		"every library has its own go-redis clients (default options).\n\n", r.Machine, r.Machine.Load)
	fmt.Fprintf(&b, "**Measured:** quorumlock at `%s` (the working tree; `-dirty`: with uncommitted changes), redsync %s, go-redis %s.\n\n",
		r.Machine.Library, r.Machine.Redsync, r.Machine.GoRedis)
	if chartFile != "" {
		fmt.Fprintf(&b, "![Key figures per library](%s)\n\n", chartFile)
	}
	b.WriteString("### Targets\n\n| # | target | measured | result |\n| --- | --- | --- | --- |\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** |\n", c.ID, c.Target, c.Measured, passFail(c.Pass))
	}
	b.WriteString("\nUnder each value: that value divided by the raw floor's (`× floor`) and by redsync's with default options (`× redsync`), left out where theirs is 0.\n")
	for _, s := range r.sections() {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n| figure | %s |\n|---%s|\n", s.Title, s.What,
			strings.Join(s.Columns, " | "), strings.Repeat("|---", len(s.Columns)))
		for _, f := range s.Figures {
			cells := make([]string, len(f.Values))
			for i, v := range f.Values {
				cells[i] = f.Format(v)
				var rs []string
				if ref := f.Values[libFloor]; i != libFloor && ref != 0 {
					rs = append(rs, ratio(v, ref)+" floor")
				}
				if ref := f.Values[libRedsync]; i != libRedsync && ref != 0 {
					rs = append(rs, ratio(v, ref)+" redsync")
				}
				if len(rs) > 0 {
					cells[i] += "<br>" + strings.Join(rs, " · ")
				}
			}
			fmt.Fprintf(&b, "| %s | %s |\n", f.Name, strings.Join(cells, " | "))
		}
	}
	b.WriteString(r.loadMarkdown())
	b.WriteString(r.primitivesMarkdown())
	b.WriteString(r.firstLockMarkdown())
	if r.Took > 0 {
		fmt.Fprintf(&b, "\nThe whole run took %v.\n", r.Took.Round(time.Second))
	}
	b.WriteString("\n")
	return b.String()
}

// writeDoc replaces what lies between the markers of the Markdown file at path
// with body, leaving the rest of the file as it is. A missing file is
// created with a title and the markers; a file without markers gets them
// appended at its end.
func writeDoc(path, body string) error {
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = []byte("# Benchmarks\n\n" + beginMarker + "\n" + endMarker + "\n")
	case err != nil:
		return err
	}
	begin := bytes.Index(old, []byte(beginMarker))
	end := bytes.Index(old, []byte(endMarker))
	if begin < 0 || end < begin {
		old = append(old, []byte("\n"+beginMarker+"\n"+endMarker+"\n")...)
		begin = bytes.Index(old, []byte(beginMarker))
		end = bytes.Index(old, []byte(endMarker))
	}
	var out bytes.Buffer
	out.Write(old[:begin+len(beginMarker)])
	out.WriteString("\n" + strings.TrimSpace(body) + "\n")
	out.Write(old[end:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// The lines printed as results come in: one per scenario and library.

func printLatency(w io.Writer, scenario, what string, names []string, rs []latencyResult) {
	for i, r := range rs {
		fmt.Fprintf(w, "%-12s %-20s %s p50 %-9s p99 %-9s (%d samples%s)\n", scenario, names[i], what,
			formatMS(ms(r.P50)), formatMS(ms(r.P99)), r.N, failureNote(r.Errors))
	}
}

func printContended(w io.Writer, rs []contendedResult) {
	for _, r := range rs {
		least, busiest, q := r.Fairness()
		fmt.Fprintf(w, "%-12s %-20s hand-offs %s  gap p50 %s p99 %s  wait p50 %s p99 %s  turns %d..%d (%.2f)  failed %d  overlaps %d%s\n",
			"contended", r.Name, formatRate(r.HandoffsPerSec()), formatMS(ms(r.Gap.P50)), formatMS(ms(r.Gap.P99)),
			formatMS(ms(r.Wait.P50)), formatMS(ms(r.Wait.P99)), least, busiest, q, r.Failed.N, r.Overlaps,
			failureNote(r.Failed)+unlockNote(r.UnlockFailed))
	}
}

func printDistinct(w io.Writer, names []string, rs []throughputResult) {
	for i, r := range rs {
		fmt.Fprintf(w, "%-12s %-20s %s (%d ops in %v%s)\n", "distinct", names[i], formatRate(r.PerSec()),
			r.Ops, r.Elapsed.Round(1e6), failureNote(r.Errors))
	}
}

func printAllocs(w io.Writer, names []string, rs []allocResult) {
	for i, r := range rs {
		fmt.Fprintf(w, "%-12s %-20s %.1f allocs/op  %.0f B/op  %.0f ns/op\n", "allocs", names[i],
			r.AllocsPerOp, r.BytesPerOp, r.NsPerOp)
	}
}

func failureNote(f failures) string {
	if f.N == 0 {
		return ""
	}
	return fmt.Sprintf("; %d failed, first: %v", f.N, f.First)
}

func unlockNote(f failures) string {
	if f.N == 0 {
		return ""
	}
	return fmt.Sprintf("; %d failed unlocks, first: %v", f.N, f.First)
}
