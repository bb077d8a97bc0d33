package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// fencedStore stands for the resource a lock protects: it remembers the
// largest fencing token it has seen and refuses writes that carry a smaller
// one, so a holder that lost the lock without knowing cannot overwrite the
// work of the next holder.
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
	entries []string
}

var errStaleToken = errors.New("refused: stale fencing token")

func (s *fencedStore) write(token uint64, entry string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return errStaleToken
	}
	s.highest = token
	s.entries = append(s.entries, entry)
	return nil
}

// outcome prints what a write returned.
func outcome(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// ExampleMutex_FencingToken shows a holder paused past its TTL: the lock
// passes to a second holder, and when the first one resumes, the resource
// refuses its late write because its fencing token is older.
func ExampleMutex_FencingToken() {
	s := miniredis.NewMiniRedis()
	_ = s.Start()
	defer s.Close()
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	rs, _ := redlock.New([]redis.UniversalClient{client})
	ctx := context.Background()
	var store fencedStore

	first := rs.NewMutex("ledger", mutex.WithTTL(time.Second), mutex.WithFencing())
	if err := first.LockContext(ctx); err != nil {
		fmt.Println("lock:", err)
		return
	}
	firstToken := first.FencingToken()
	fmt.Println("first holder writes:", outcome(store.write(firstToken, "debit 10")))

	s.FastForward(2 * time.Second) // the first holder stops (a GC pause) past its TTL...
	second := rs.NewMutex("ledger", mutex.WithTTL(time.Second), mutex.WithFencing())
	if err := second.LockContext(ctx); err != nil { // ...and the lock passes on
		fmt.Println("lock:", err)
		return
	}
	fmt.Println("second holder has a larger token:", second.FencingToken() > firstToken)
	fmt.Println("second holder writes:", outcome(store.write(second.FencingToken(), "debit 20")))

	// The first holder resumes, unaware, and writes with its old token.
	fmt.Println("first holder writes again:", outcome(store.write(firstToken, "debit 10 again")))
	fmt.Println("entries:", store.entries)

	if err := first.UnlockContext(ctx); errors.Is(err, mutex.ErrNotHeld) {
		fmt.Println("the first holder learns it had lost the lock")
	}
	_ = second.UnlockContext(ctx)
	// Output:
	// first holder writes: ok
	// second holder has a larger token: true
	// second holder writes: ok
	// first holder writes again: refused: stale fencing token
	// entries: [debit 10 debit 20]
	// the first holder learns it had lost the lock
}

// ExampleMutex_Lost runs work under a lock renewed in the background, and
// stops it if the lock is lost before the work is done.
func ExampleMutex_Lost() {
	s := miniredis.NewMiniRedis()
	_ = s.Start()
	defer s.Close()
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	rs, _ := redlock.New([]redis.UniversalClient{client})
	ctx := context.Background()

	m := rs.NewMutex("reindex", mutex.WithTTL(10*time.Second), mutex.WithAutoExtend())
	if err := m.LockContext(ctx); err != nil {
		fmt.Println("lock:", err)
		return
	}
	results := make(chan int, 1) // buffered: the worker never blocks if nobody reads
	go func() {
		sum := 0
		for i := range 5 {
			sum += i // ... the work ...
		}
		results <- sum
	}()
	select {
	case sum := <-results:
		fmt.Println("work done:", sum)
	case <-m.Lost():
		// Another owner may get the lock from now on: stop, and do not commit.
		fmt.Println("lock lost, work abandoned:", m.LostCause())
	}
	fmt.Println("lock lost:", m.LostCause() != nil)
	if err := m.UnlockContext(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output:
	// work done: 10
	// lock lost: false
}
