package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// The judgements Check cannot be shown on a real server on this machine: a
// node clock set apart from the client's, an old Redis.

func TestJudgeClock(t *testing.T) {
	r := &Redlock{set: &engine.Set{DriftFactor: timing.DefaultDriftFactor}} // allowance 82ms
	tests := []struct {
		offset, uncertain time.Duration
		want              string // "" for no finding
	}{
		{0, 0, ""},
		{80 * time.Millisecond, 0, ""},
		{-100 * time.Millisecond, 30 * time.Millisecond, ""}, // may be 70ms
		{100 * time.Millisecond, time.Millisecond, "100ms ahead of"},
		{-2 * time.Second, time.Millisecond, "2s behind"},
	}
	for _, tt := range tests {
		in := inspection{NodeReport: NodeReport{Node: "n", ClockOffset: tt.offset}}
		r.judgeClock(&in, tt.uncertain)
		if tt.want == "" {
			assert.Empty(t, in.findings, "offset %v", tt.offset)
			continue
		}
		require.Len(t, in.findings, 1, "offset %v", tt.offset)
		assert.Equal(t, Risky, in.findings[0].Severity)
		assert.Equal(t, "TIME", in.findings[0].Setting)
		assert.Contains(t, in.findings[0].Message, tt.want)
	}
}

func TestJudgeVersion(t *testing.T) {
	for v, unfit := range map[string]bool{"4.0.14": true, "3.2.1": true, "5.0.0": false, "7.2.4": false, "": false, "x": false} {
		in := inspection{NodeReport: NodeReport{Node: "n", Version: v}}
		judgeVersion(&in)
		assert.Equal(t, unfit, len(in.findings) == 1, "version %q", v)
	}
}

func TestJudgeLatencyDerivedTimeout(t *testing.T) {
	r := &Redlock{set: &engine.Set{}} // derived timeout: at most 500ms
	for rtt, want := range map[time.Duration]Severity{time.Millisecond: 0, 70 * time.Millisecond: Risky, 600 * time.Millisecond: Unfit} {
		in := inspection{NodeReport: NodeReport{Node: "n", RTT: rtt}}
		r.judgeLatency(&in)
		if want == 0 {
			assert.Empty(t, in.findings, "rtt %v", rtt)
			continue
		}
		require.Len(t, in.findings, 1, "rtt %v", rtt)
		assert.Equal(t, want, in.findings[0].Severity, "rtt %v", rtt)
	}
}
