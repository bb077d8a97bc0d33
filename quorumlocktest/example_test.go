package quorumlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// The body of each example is what a test would hold; inTest stands for
// the test's *testing.T.

func Example() {
	inTest(func(t testing.TB) {
		nodes := quorumlocktest.Start(t, 5)
		rs := nodes.Redlock(redlock.WithKeyPrefix("app:"))
		m := rs.NewMutex("order:42")
		fmt.Println("lock:", m.LockContext(context.Background()))
		fmt.Println("unlock:", m.UnlockContext(context.Background()))
	})
	// Output:
	// lock: <nil>
	// unlock: <nil>
}

// A majority of nodes down: the lock is refused at once, as unavailable,
// not as held by someone else.
func ExampleNodes_Stop() {
	inTest(func(t testing.TB) {
		nodes := quorumlocktest.Start(t, 5)
		rs := nodes.Redlock()
		for i := range 3 {
			nodes.Stop(i)
		}
		err := rs.NewMutex("order:42").TryLockContext(context.Background())
		fmt.Println("unavailable:", errors.Is(err, mutex.ErrNodesUnavailable))

		for i := range 3 {
			nodes.Start(i)
		}
		err = rs.NewMutex("order:42").TryLockContext(context.Background())
		fmt.Println("after Start:", err)
	})
	// Output:
	// unavailable: true
	// after Start: <nil>
}

// A majority of nodes hung: the call returns when its ctx ends.
func ExampleNodes_Hang() {
	inTest(func(t testing.TB) {
		nodes := quorumlocktest.Start(t, 5)
		rs := nodes.Redlock(redlock.WithNodeTimeout(time.Second))
		for i := range 3 {
			nodes.Hang(i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := rs.NewMutex("order:42").LockContext(ctx)
		fmt.Println("not obtained:", errors.Is(err, mutex.ErrNotObtained))
		fmt.Println("deadline:", errors.Is(err, context.DeadlineExceeded))
		for i := range 3 {
			nodes.Unhang(i)
		}
	})
	// Output:
	// not obtained: true
	// deadline: true
}

// Every node restarted empty under a lease (a power cut): the holder is
// told within one renewal.
func ExampleNodes_Restart() {
	inTest(func(t testing.TB) {
		nodes := quorumlocktest.Start(t, 5)
		rs := nodes.Redlock()
		job := rs.NewMutex("job:7", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
		if err := job.LockContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 5 { // down together: a lease survives restarts one at a time
			nodes.Hang(i)
		}
		for i := range 5 {
			nodes.Restart(i)
		}
		select {
		case <-job.Lost(): // within one renewal (TTL/3)
			fmt.Println("lost, not held:", errors.Is(job.LostCause(), mutex.ErrNotHeld))
		case <-time.After(5 * time.Second):
			fmt.Println("still held")
		}
	})
	// Output:
	// lost, not held: true
}

// A holder that stalls past its TTL: the lock passes on, and the first
// holder's unlock reports that it no longer held it.
func ExampleNodes_FastForward() {
	inTest(func(t testing.TB) {
		nodes := quorumlocktest.Start(t, 5)
		rs := nodes.Redlock()
		ctx := context.Background()
		first := rs.NewMutex("invoice:9", mutex.WithTTL(10*time.Second))
		if err := first.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		nodes.FastForward(10 * time.Second) // no sleeping
		second := rs.NewMutex("invoice:9", mutex.WithTTL(10*time.Second))
		fmt.Println("second:", second.TryLockContext(ctx))
		err := first.UnlockContext(ctx)
		fmt.Println("first unlock, not held:", errors.Is(err, mutex.ErrNotHeld))
	})
	// Output:
	// second: <nil>
	// first unlock, not held: true
}
