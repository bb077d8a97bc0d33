package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/bench/firstlock"
)

// Scenario 12 measures what every fresh instance pays for its first lock
// (issue 22): new go-redis clients (default options) to the five nodes, a
// new Redlock (or redsync), one TryLock and one Unlock, timed together; the
// clients are closed after the clock stops. The libraries alternate, one
// call each, so that drift favours neither; quorumlock runs a third time in
// a child process in FIPS 140-only mode (GODEBUG=fips140=only, the
// fipsfirst command), where it learns script digests from the servers
// instead of computing them.
const (
	// maxFirstLockVsRedsync is target 12: quorumlock's p50 at most this ×
	// redsync's.
	maxFirstLockVsRedsync = 1.2
)

// The rows of scenario 12.
const (
	firstQuorumlock = iota
	firstRedsync
	firstQuorumlockFIPS
)

var firstLockNames = []string{
	firstQuorumlock:     "quorumlock",
	firstRedsync:        "redsync",
	firstQuorumlockFIPS: "quorumlock, FIPS 140-only",
}

// firstLock is one first lock of a new instance of a library, on name.
type firstLock func(ctx context.Context, addrs []string, name string) (time.Duration, error)

func redsyncFirstLock(ctx context.Context, addrs []string, name string) (time.Duration, error) {
	start := time.Now()
	clients := make([]redis.UniversalClient, len(addrs))
	pools := make([]redsyncredis.Pool, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		clients[i], pools[i] = c, goredis.NewPool(c)
	}
	defer firstlock.CloseAll(clients)
	m := redsync.New(pools...).NewMutex(name)
	if err := m.TryLockContext(ctx); err != nil {
		return 0, err
	}
	if ok, err := m.UnlockContext(ctx); err != nil || !ok {
		return 0, &unlockError{errors.Join(err, errors.New("redsync: not unlocked"))}
	}
	return time.Since(start), nil
}

// firstLockScenario is scenario 12: s.firstLocks first locks per library,
// alternating, each on a name of its own, then as many by quorumlock in a
// FIPS 140-only child process.
func firstLockScenario(ctx context.Context, addrs []string, s settings) ([]latencyResult, error) {
	libs := []firstLock{firstQuorumlock: firstlock.Quorumlock, firstRedsync: redsyncFirstLock}
	samples := make([][]time.Duration, len(firstLockNames))
	results := make([]latencyResult, len(firstLockNames))
	for i := range s.firstLocks {
		for lib, first := range libs {
			ctx, cancel := context.WithTimeout(ctx, opTimeout)
			d, err := first(ctx, addrs, fmt.Sprintf("bench:first:%d:%d", lib, i))
			cancel()
			if err != nil {
				results[lib].Errors.add(err)
				continue
			}
			samples[lib] = append(samples[lib], d)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	fips, err := fipsFirstLocks(ctx, addrs, s.firstLocks)
	if err != nil {
		results[firstQuorumlockFIPS].Errors.add(err)
	}
	samples[firstQuorumlockFIPS] = fips
	for i := range results {
		results[i].percentiles = summarize(samples[i])
	}
	return results, nil
}

// fipsFirstLocks builds the fipsfirst command, runs it in FIPS 140-only
// mode for n first locks of quorumlock, and returns their durations.
func fipsFirstLocks(ctx context.Context, addrs []string, n int) ([]time.Duration, error) {
	dir, err := os.MkdirTemp("", "bench-fipsfirst")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "fipsfirst")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./fipsfirst")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the FIPS 140-only child (run the bench from internal/bench): %w: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*opTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, strings.Join(addrs, ","), strconv.Itoa(n))
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("FIPS 140-only child: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var ns []int64
	if err := json.Unmarshal(out, &ns); err != nil {
		return nil, fmt.Errorf("FIPS 140-only child: %w", err)
	}
	ds := make([]time.Duration, len(ns))
	for i, v := range ns {
		ds[i] = time.Duration(v)
	}
	return ds, nil
}

// firstLockCheck evaluates target 12, if scenario 12 ran.
func (r *report) firstLockCheck() []check {
	f := r.FirstLock
	if len(f) == 0 {
		return nil
	}
	v := ms(f[firstQuorumlock].P50) / ms(f[firstRedsync].P50)
	return []check{{
		ID:     "12",
		Target: fmt.Sprintf("first lock of a new instance (new clients, Redlock, TryLock+Unlock): p50 ≤ %.1f× redsync's, and it works in FIPS 140-only mode", maxFirstLockVsRedsync),
		Measured: fmt.Sprintf("%s vs %s: %s; FIPS 140-only %s, %d failed", formatMS(ms(f[firstQuorumlock].P50)), formatMS(ms(f[firstRedsync].P50)),
			targetRatio(v, maxFirstLockVsRedsync), formatMS(ms(f[firstQuorumlockFIPS].P50)), f[firstQuorumlockFIPS].Errors.N),
		Pass: v <= maxFirstLockVsRedsync && f[firstQuorumlock].Errors.N == 0 && f[firstQuorumlockFIPS].Errors.N == 0 && f[firstQuorumlockFIPS].N > 0,
	}}
}

// firstLockMarkdown returns the table of scenario 12 for docs/benchmarks.md.
func (r *report) firstLockMarkdown() string {
	f := r.FirstLock
	if len(f) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### 12. First lock of a new instance\n\n%d times per library, alternating: new go-redis clients (default options) to the five nodes, a new Redlock (redsync: `redsync.New`), `TryLockContext` and `UnlockContext` on a new name, timed together (closing the clients is not). The FIPS 140-only row is quorumlock in a child process run with `GODEBUG=fips140=only`.\n\n", r.Settings.firstLocks)
	b.WriteString("| library | p50 | × redsync | p99 | failed |\n|---|---|---|---|---|\n")
	for i, l := range f {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", firstLockNames[i], formatMS(ms(l.P50)), ratio(ms(l.P50), ms(f[firstRedsync].P50)), formatMS(ms(l.P99)), l.Errors.N)
	}
	return b.String()
}
