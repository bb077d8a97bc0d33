package quorumlocktest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// backend is one node's data: a miniredis whose keys expire in real time,
// plus what the library reads of a Redis server that miniredis lacks (see
// the package doc, "Where miniredis differs").
type backend struct {
	m       *miniredis.Miniredis
	runID   string       // new at every start, as Redis's run_id
	started time.Time    // for uptime_in_seconds
	ahead   atomic.Int64 // nanoseconds FastForward has moved the node's clock
}

// newBackend starts an empty miniredis on a loopback port of its own.
func newBackend() (*backend, error) {
	id := make([]byte, 20)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	b := &backend{m: miniredis.NewMiniRedis(), runID: hex.EncodeToString(id), started: time.Now()}
	if err := b.m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("quorumlocktest: starting miniredis: %w", err)
	}
	b.m.ClockTTL(true) // TTLs run down with real time, as on Redis
	b.m.Server().SetPreHook(b.hook)
	return b, nil
}

// now is the node's clock: real time plus what FastForward added.
func (b *backend) now() time.Time { return time.Now().Add(time.Duration(b.ahead.Load())) }

// fastForward ages every key by d and moves the node's clock (TIME, uptime)
// by d, as if d had passed on the node alone.
func (b *backend) fastForward(d time.Duration) {
	b.ahead.Add(int64(d))
	b.m.FastForward(d)
}

// hook answers, before miniredis, the commands it lacks or answers
// differently: INFO server (run_id, uptime_in_seconds), and TIME on the
// node's clock (scripts' redis.call('TIME') comes here too).
func (b *backend) hook(c *server.Peer, cmd string, args ...string) bool {
	switch {
	case cmd == "TIME" && len(args) == 0:
		now := b.now().UnixMicro()
		c.WriteLen(2)
		c.WriteBulk(strconv.FormatInt(now/1e6, 10))
		c.WriteBulk(strconv.FormatInt(now%1e6, 10))
		return true
	case cmd == "INFO" && len(args) == 1 && strings.EqualFold(args[0], "server"):
		up := int64(b.now().Sub(b.started) / time.Second)
		c.WriteBulk(fmt.Sprintf("# Server\r\nredis_mode:standalone\r\nrun_id:%s\r\nuptime_in_seconds:%d\r\n", b.runID, up))
		return true
	}
	return false
}

func (b *backend) close() { b.m.Close() }
