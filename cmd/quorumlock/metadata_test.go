package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// run stores host, pid and start time with the lock by default, and inspect
// shows them; --metadata replaces them, --metadata "" stores none.
func TestRunStoresMetadataThatInspectShows(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	host, err := os.Hostname()
	require.NoError(t, err)

	before := time.Now().Truncate(time.Second)
	p := start(t, env, append([]string{"run", "job:md", "--"}, helperCmd("hold")...)...)
	p.expect("holding job:md")
	code, out, stderr := run(t, env, "inspect", "job:md")
	require.Equal(t, 0, code, "stderr %q", stderr)
	want := fmt.Sprintf(`metadata "host=%s pid=%d start=`, host, p.cmd.Process.Pid)
	require.Contains(t, out, want)
	stamp := regexp.MustCompile(`start=([^"]+)"`).FindStringSubmatch(out)
	require.NotNil(t, stamp, out)
	started, err := time.Parse(time.RFC3339, stamp[1])
	require.NoError(t, err)
	assert.False(t, started.Before(before) || started.After(time.Now()), "start %v", started)
	assert.True(t, strings.HasSuffix(stamp[1], "Z"), "in UTC: %s", stamp[1])
	p.tell()
	require.Equal(t, 0, p.wait())

	for flag, shown := range map[string]string{"--metadata=job=42": `metadata "job=42"`, "--metadata=": ""} {
		p := start(t, env, append([]string{"run", flag, "job:md", "--"}, helperCmd("hold")...)...)
		p.expect("holding job:md")
		code, out, stderr := run(t, env, "inspect", "job:md")
		require.Equal(t, 0, code, "stderr %q", stderr)
		require.Contains(t, out, "held by", flag)
		if shown != "" {
			assert.Contains(t, out, shown, flag)
		} else {
			assert.NotContains(t, out, "metadata", flag)
		}
		p.tell()
		require.Equal(t, 0, p.wait())
	}
}

// Metadata over the limit, or with --limit (permits carry none), is a usage
// error: CMD does not run.
func TestRunMetadataUsageErrors(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	for what, args := range map[string][]string{
		"too long":   {"--metadata", strings.Repeat("x", 1025)},
		"with limit": {"--limit", "2", "--metadata", "job=1"},
	} {
		code, out, stderr := run(t, env, append(append(append([]string{"run"}, args...), "job:md-usage", "--"), helperCmd("env", "0")...)...)
		assert.Equal(t, exitUsage, code, "%s: stderr %q", what, stderr)
		assert.NotContains(t, out, "name job:md-usage", "%s: CMD did not run", what)
	}
}
