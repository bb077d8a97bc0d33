package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spans [][2]int64
		want  int
	}{
		{"none", nil, 0},
		{"disjoint", [][2]int64{{5, 6}, {1, 2}, {3, 4}}, 0},
		{"touching", [][2]int64{{1, 2}, {2, 3}}, 0},
		{"nested", [][2]int64{{1, 10}, {2, 3}, {4, 5}}, 2},
		{"chained", [][2]int64{{1, 3}, {2, 4}, {5, 6}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overlaps(tc.spans); got != tc.want {
				t.Errorf("overlaps = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMostAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spans [][2]int64
		want  int
	}{
		{"none", nil, 0},
		{"disjoint", [][2]int64{{5, 6}, {1, 2}, {3, 4}}, 1},
		{"touching", [][2]int64{{1, 2}, {2, 3}}, 1},
		{"nested", [][2]int64{{1, 10}, {2, 3}, {4, 5}}, 2},
		{"four at once", [][2]int64{{1, 10}, {2, 9}, {3, 8}, {4, 7}, {8, 12}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mostAtOnce(tc.spans); got != tc.want {
				t.Errorf("mostAtOnce = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMergeContenders(t *testing.T) {
	reports := []contenderReport{
		{Start: 0, End: 1e9, Workers: []contenderWorker{{Acquired: []int64{10, 30}, Released: []int64{20, 40}, Wait: []int64{1, 2}}}},
		{Start: 1, End: 2e9, Workers: []contenderWorker{{Acquired: []int64{35}, Released: []int64{50}, Wait: []int64{3}}}, Failed: 1, FirstFailure: "x"},
	}
	r := mergeContenders(2, reports)
	if r.Acquisitions != 3 || r.Overlaps != 1 || r.Failed != 1 || r.Elapsed != 2*time.Second || len(r.Turns) != 2 {
		t.Errorf("merged %+v", r)
	}
}

func TestScenarioSet(t *testing.T) {
	var s scenarioSet
	if err := s.Set("1-5,8"); err != nil {
		t.Fatal(err)
	}
	if s.String() != "1,2,3,4,5,8" || !s.classic() || s.has(6) {
		t.Errorf("got %s", s)
	}
	if allScenarios.String() != "1,2,3,4,5,6,7,8,9,10,11,12" {
		t.Errorf("all = %s", allScenarios)
	}
	for _, bad := range []string{"0", "13", "3-2", "x"} {
		if err := s.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// TestReport renders the chart and the document of a made-up full run.
func TestReport(t *testing.T) {
	s := defaultSettings()
	r := &report{Settings: s, Names: []string{"quorumlock", "redsync", "redsync-failfast", "raw-floor"}}
	r.Uncontended = make([]latencyResult, numLibs)
	r.UncontendedNew = make([]latencyResult, numLibs)
	r.Slowed = make([]latencyResult, numLibs)
	r.Distinct = make([]throughputResult, numLibs)
	r.Allocs = make([]allocResult, numLibs)
	r.Contended = make([]contendedResult, numLibs)
	for i := range numLibs {
		r.Uncontended[i].P50 = time.Millisecond
		r.UncontendedNew[i].P50 = time.Millisecond
		r.Slowed[i].P50 = time.Millisecond
		r.Distinct[i] = throughputResult{Ops: 100, Elapsed: time.Second}
		r.Allocs[i].AllocsPerOp = 100
		r.Contended[i] = contendedResult{Name: r.Names[i], Elapsed: time.Second, Acquisitions: 100, Turns: []int{50, 50}}
	}
	r.Procs = make([][]procsResult, numLoadLibs)
	r.Waiters = make([]waitersResult, numLoadLibs)
	r.Bursts = make([][]burstResult, numLoadLibs)
	for lib := range numLoadLibs {
		for _, p := range s.procCounts {
			r.Procs[lib] = append(r.Procs[lib], procsResult{Procs: p, Elapsed: time.Second, Acquisitions: 100 * (lib + 1), Turns: []int{1, 1}})
		}
		r.Waiters[lib] = waitersResult{Instances: 100, Obtained: 100, AllIn: time.Second}
		for _, b := range s.bursts {
			r.Bursts[lib] = append(r.Bursts[lib], burstResult{burstConfig: b, Calls: 10, Obtained: 10, Kinds: map[string]int{}})
		}
	}
	for _, l := range s.leases {
		r.Leases = append(r.Leases, leaseResult{leaseConfig: l, Acquired: l.Leases, GoroutinesPeak: 50})
	}
	for range primitiveNames {
		r.Primitives = append(r.Primitives, latencyResult{percentiles: percentiles{N: 1, P50: time.Millisecond, P99: time.Millisecond}})
	}
	r.Semaphore = procsResult{Procs: semaphoreProcs, Elapsed: time.Second, Acquisitions: 100, Turns: []int{1, 1}, MostAtOnce: semaphoreLimit}
	dir := t.TempDir()
	doc, chart := filepath.Join(dir, "b.md"), filepath.Join(dir, "b.png")
	checks := r.checks()
	if err := writeReport(&strings.Builder{}, r, checks, doc, chart); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### 6. Contenders in separate processes", "| 8 × 2 |", "### 9. Leases", "| 6a |", "| 9b |",
		"new lock, lock+unlock p50", "| 1b |", "| 5b |",
		"### 10. Primitives, uncontended", "| write lock |", "| 10a |", "| 10c |", "### 11. A contended semaphore", "| safe11 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("document lacks %q", want)
		}
	}
	if fi, err := os.Stat(chart); err != nil || fi.Size() == 0 {
		t.Errorf("chart: %v", err)
	}
}

func TestPlainTicksRoundFloatNoise(t *testing.T) {
	for _, tk := range (plainTicks{}).Ticks(0, 1.25*0.98) {
		if len(tk.Label) > 6 {
			t.Errorf("tick %v labelled %q", tk.Value, tk.Label)
		}
	}
}
