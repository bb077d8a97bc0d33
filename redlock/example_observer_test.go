package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// An Observer of one's own: here, a count of outcomes per primitive and
// op, labelled without the lock's name (one per order would be one label
// value per order). Package otelquorumlock gives the same through
// OpenTelemetry: redlock.WithObserver(otelquorumlock.NewObserver()).
func ExampleWithObserver() {
	clients, stop := embeddedNodes(3)
	defer stop()
	var mu sync.Mutex
	counts := map[string]int{}
	rs, err := redlock.New(clients, redlock.WithObserver(&redlock.Observer{
		Done: func(_ context.Context, c redlock.Call, r redlock.Result) {
			mu.Lock()
			defer mu.Unlock()
			counts[fmt.Sprintf("%s %s %s", c.Primitive, c.Op, r.Outcome)]++
		},
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	holder, other := rs.NewMutex("orders:42"), rs.NewMutex("orders:42")
	_ = holder.LockContext(ctx)
	_ = other.TryLockContext(ctx) // refused: holder has it
	_ = holder.UnlockContext(ctx)

	mu.Lock()
	defer mu.Unlock()
	fmt.Println(counts["mutex lock obtained"], counts["mutex trylock busy"], counts["mutex unlock released"])
	// Output: 1 1 1
}
