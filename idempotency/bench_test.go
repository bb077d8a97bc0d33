package idempotency_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

// BenchmarkDo compares, on 5 local redis-servers, a first run of Do (a new
// key each time), a replay, and a plain lock+unlock of a Mutex with the
// options Do's lock has (one Mutex, and a new one on a new name each time,
// as Do makes). Besides ns/op it reports the script calls each
// node received per operation (scripts/op): each is one round trip, as
// every fan-out reaches all nodes in parallel.
//
//	go test -run '^$' -bench Do ./idempotency/
func BenchmarkDo(b *testing.B) {
	servers := redistest.Start(b, 5)
	rs := newRedlock(b, servers)
	s := idempotency.New(rs)
	work := func(context.Context) ([]byte, error) { return []byte("receipt"), nil }
	b.Run("lock+unlock", func(b *testing.B) {
		m := rs.NewMutex("bench", mutex.WithAutoExtend(), mutex.WithFencing())
		measure(b, servers, func(i int) error {
			if err := m.LockContext(b.Context()); err != nil {
				return err
			}
			return m.UnlockContext(b.Context())
		})
	})
	runs := 0 // b.Run calls its func more than once: every key is new
	b.Run("lock+unlock new Mutex", func(b *testing.B) {
		runs++
		prefix := "bench-" + strconv.Itoa(runs) + "-"
		measure(b, servers, func(i int) error {
			m := rs.NewMutex(prefix+strconv.Itoa(i), mutex.WithAutoExtend(), mutex.WithFencing())
			if err := m.LockContext(b.Context()); err != nil {
				return err
			}
			return m.UnlockContext(b.Context())
		})
	})
	b.Run("first run", func(b *testing.B) {
		runs++
		prefix := "new-" + strconv.Itoa(runs) + "-"
		measure(b, servers, func(i int) error {
			_, _, err := s.Do(b.Context(), prefix+strconv.Itoa(i), nil, work)
			return err
		})
	})
	b.Run("replay", func(b *testing.B) {
		if _, _, err := s.Do(b.Context(), "replayed", nil, work); err != nil {
			b.Fatal(err)
		}
		measure(b, servers, func(int) error {
			_, _, err := s.Do(b.Context(), "replayed", nil, work)
			return err
		})
	})
}

// measure runs op b.N times and reports the script calls per op on node 0.
func measure(b *testing.B, servers []*redistest.Server, op func(i int) error) {
	before := scriptCalls(b, servers[0])
	b.ResetTimer()
	for i := range b.N {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(scriptCalls(b, servers[0])-before)/float64(b.N), "scripts/op")
}

// scriptCalls returns the EVAL and EVALSHA calls s has run.
func scriptCalls(b *testing.B, s *redistest.Server) int64 {
	info := s.Do(b, "INFO", "commandstats").(string)
	var n int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_eval:", "cmdstat_evalsha:"} {
			if rest, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += v
			}
		}
	}
	return n
}
