package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// machine describes where a run took place, for the report.
type machine struct {
	CPU   string // model name from /proc/cpuinfo, or "unknown"
	Cores int    // logical CPUs usable by this process
	OS    string
	Arch  string
	Go    string // the toolchain that built this program
	Redis string // redis-server version
	Load  string // 1-minute load average when the run started, or "unknown"
	Date  time.Time
	// Library is the quorumlock revision measured: the working tree that
	// go.mod's replace points at, as `git describe --always --dirty` names it
	// ("-dirty": with uncommitted changes), or "unknown".
	Library string
	// Redsync and GoRedis are the versions of those modules built in.
	Redsync, GoRedis string
}

// repoRoot is the quorumlock working tree that go.mod's replace directive
// points at, relative to internal/bench, where `go run .` runs.
const repoRoot = "../.."

// describeMachine returns the machine this program runs on; redis is the
// version of the redis-server it started.
func describeMachine(ctx context.Context, redis string) machine {
	return machine{
		CPU:     cpuModel(),
		Cores:   runtime.NumCPU(),
		OS:      runtime.GOOS,
		Arch:    runtime.GOARCH,
		Go:      runtime.Version(),
		Redis:   redis,
		Load:    loadAverage(),
		Date:    time.Now().UTC(),
		Library: revision(ctx, repoRoot),
		Redsync: moduleVersion("github.com/go-redsync/redsync/v4"),
		GoRedis: moduleVersion("github.com/redis/go-redis/v9"),
	}
}

// String is the machine in one line.
func (m machine) String() string {
	return fmt.Sprintf("%s, %d cores, %s/%s, %s, redis-server %s, %s",
		m.CPU, m.Cores, m.OS, m.Arch, m.Go, m.Redis, m.Date.Format("2006-01-02 15:04 MST"))
}

// loadAverage returns the 1-minute load average from /proc/loadavg, or
// "unknown". Other work on the machine during a run shows up there.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// revision names the git revision of the working tree at dir, with "-dirty"
// when it has uncommitted changes to tracked files, or "unknown" without git.
func revision(ctx context.Context, dir string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown"
// where there is none (outside Linux, or on CPUs that do not report one).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			if v := strings.TrimSpace(value); v != "" {
				return v
			}
		}
	}
	return "unknown"
}

// moduleVersion returns the version of the module at path that this program
// was built with, or "unknown".
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == path {
			return dep.Version
		}
	}
	return "unknown"
}
