package main

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// go-redis probes a node it failed to dial many times (the killed one) from
// a goroutine that checks every second whether its client was closed: it
// ends within a second of Close, after the last test's cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// TestRun runs the program as `go run .` does, on embedded nodes; run fails
// unless /metrics served every instrument the run recorded.
func TestRun(t *testing.T) {
	redistest.SkipMiniredisInFIPSOnly(t)
	require.NoError(t, run(t.Context(), t.Output(), config{addr: "127.0.0.1:0", duration: 2 * time.Second}))
}

// series returns the values of the series of body called name that have
// every one of labels (`key="value"`).
func series(t *testing.T, body, name string, labels ...string) []float64 {
	t.Helper()
	var values []float64
	for line := range strings.Lines(body) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		require.True(t, ok, "a series without a value: %q", line)
		matched := true
		for _, l := range labels {
			matched = matched && strings.Contains(set, l)
		}
		if matched {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			require.NoError(t, err, "%q", line)
			values = append(values, v)
		}
	}
	return values
}

func sum(values []float64) float64 {
	s := 0.0
	for _, v := range values {
		s += v
	}
	return s
}

// On 5 real redis-servers with an 8s restart quarantine (the workers' TTL,
// which it may not be shorter than), up for longer than that so that they
// count from the start, one of them killed
// and another restarted empty half way (so that every instrument is
// recorded): /metrics answers while the workers contend, and afterwards has
// each instrument with the attributes that say what happened, and no lock
// name.
func TestMetricsEndpointOnRealNodes(t *testing.T) {
	servers := redistest.Start(t, 5)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
	}
	const quarantine = 8 * time.Second
	redistest.AwaitUptime(t, servers, quarantine)
	cfg := config{addr: "127.0.0.1:0", quarantine: quarantine}
	svc, err := start(t.Context(), urls, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, svc.Close()) }()

	contended := make(chan error, 1)
	fault := func() {
		servers[4].Kill()
		servers[3].RestartEmpty()
	}
	go func() { contended <- svc.contend(t.Context(), io.Discard, 2500*time.Millisecond, fault) }()
	_, err = scrape(t.Context(), svc.URL())
	require.NoError(t, err, "served while the workers contend")
	require.NoError(t, <-contended)
	body, err := scrape(t.Context(), svc.URL())
	require.NoError(t, err)

	mutex := `quorumlock_primitive="mutex"`
	assert.Positive(t, sum(series(t, body, "quorumlock_acquire_duration_seconds_count", mutex, `quorumlock_outcome="obtained"`)))
	assert.Positive(t, sum(series(t, body, "quorumlock_acquire_duration_seconds_count", mutex, `quorumlock_outcome="busy"`)),
		"the poller's tries found the lock busy")
	assert.Positive(t, sum(series(t, body, "quorumlock_acquire_attempts_count", mutex)))
	assert.Positive(t, sum(series(t, body, "quorumlock_hold_duration_seconds_count", mutex)))
	assert.Equal(t, 1.0, sum(series(t, body, "quorumlock_release_validity_left_seconds_bucket", mutex, `le="0"`)),
		"one release, the job's, came after its validity's end")
	assert.Equal(t, 1.0, sum(series(t, body, "quorumlock_lease_lost_total", mutex, `quorumlock_cause="not_held"`)))
	killed := `server_port="` + strconv.Itoa(servers[4].Port()) + `"`
	assert.Positive(t, sum(series(t, body, "quorumlock_node_errors_total", `server_address="127.0.0.1"`, killed, `error_type="connection"`)))
	restarted := `server_port="` + strconv.Itoa(servers[3].Port()) + `"`
	assert.Len(t, series(t, body, "quorumlock_node_quarantined", restarted), 1,
		"the restarted node entered the quarantine (and may have left it since)")
	assert.Zero(t, sum(series(t, body, "quorumlock_waiters")), "no worker waits once the run is over")
	assert.NotEmpty(t, series(t, body, "quorumlock_waiters", mutex))
	for _, name := range []string{`"report"`, `"export"`} {
		assert.NotContains(t, body, name, "lock names are not labels")
	}
}
