package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// BenchmarkScaleOut measures lock+unlock of distinct names (64 goroutines,
// one Redlock) on N = 3 single servers against N = 3 Redis Clusters of k
// primaries, and reports operations/s, operations/s per primary, and how
// the names spread over the shards (the busiest shard's share). On a
// machine with few cores the servers share them, which bounds the gain;
// docs/operations.md, "Scaling out", gives the arithmetic.
//
//	go test -run '^$' -bench ScaleOut -benchtime 5s ./redlock/
func BenchmarkScaleOut(b *testing.B) {
	for _, k := range []int{0, 3} { // 0: single servers
		name := "singles"
		if k > 0 {
			name = fmt.Sprintf("clusters-of-%d", k)
		}
		b.Run(name, func(b *testing.B) {
			var clients []redis.UniversalClient
			var shards func(key string) int
			primaries := 3
			if k == 0 {
				for _, s := range redistest.Start(b, 3) {
					clients = append(clients, s.Client(b))
				}
				shards = func(string) int { return 0 }
			} else {
				clusters := redistest.StartClusters(b, 3, k, 0)
				clients = redistest.ClusterClients(b, clusters, func(o *redis.ClusterOptions) { o.MaxRedirects = -1 })
				shards = clusters[0].Shard
				primaries = 3 * k
			}
			rs, err := redlock.New(clients)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = rs.Close() })
			var next, failed atomic.Int64
			perShard := make([]atomic.Int64, max(k, 1))
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					key := "scale:" + strconv.FormatInt(next.Add(1), 10)
					perShard[shards(key)].Add(1)
					m := rs.NewMutex(key)
					if err := m.TryLockContext(ctx); err != nil {
						failed.Add(1)
						continue
					}
					if err := m.UnlockContext(ctx); err != nil {
						failed.Add(1)
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			ops := float64(b.N) / elapsed.Seconds()
			busiest := int64(0)
			for i := range perShard {
				busiest = max(busiest, perShard[i].Load())
			}
			b.ReportMetric(ops, "ops/s")
			b.ReportMetric(ops*3/float64(primaries), "ops/s/primary") // each op runs on one primary of each of the 3 nodes
			b.ReportMetric(float64(busiest)/float64(b.N), "busiest-shard-share")
			b.ReportMetric(float64(failed.Load()), "failed")
		})
	}
}
