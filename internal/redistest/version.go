package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// versionTimeout bounds `redis-server --version`.
const versionTimeout = 10 * time.Second

// majorVersions caches, per binary path, a sync.OnceValues func that runs
// `redis-server --version` at most once.
var majorVersions sync.Map // string → func() (int, error)

var versionRE = regexp.MustCompile(`\bv=(\d+)\.`)

// majorVersion returns the major version of the redis-server binary at bin,
// running it with --version only the first time it is asked about that path.
func majorVersion(bin string) (int, error) {
	f, _ := majorVersions.LoadOrStore(bin, sync.OnceValues(func() (int, error) {
		return probeVersion(bin)
	}))
	return f.(func() (int, error))()
}

func probeVersion(bin string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", bin, err)
	}
	return parseMajorVersion(string(out))
}

// parseMajorVersion extracts the major version from `redis-server --version`
// output such as "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0".
func parseMajorVersion(out string) (int, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("cannot find the version in redis-server --version output %q", out)
	}
	return strconv.Atoi(m[1])
}
