// Command fencing shows what a lock cannot do alone, and what a fencing token
// adds. A holder that is paused (a GC pause, a stopped VM, a swapped-out
// process) longer than its lock's validity loses the lock without knowing it:
// another holder gets the lock and writes, then the first one resumes and
// writes too, over the second one's work. No lock client can prevent that,
// because the paused holder runs no code until it resumes. The protected
// resource can: with mutex.WithFencing every acquisition carries a number
// that increases from one holder to the next, and a store that refuses writes
// carrying a number older than one it has seen turns the late write into an
// error.
//
// The program plays the story: A locks with a 300ms TTL and pauses before
// writing; B waits for A's lock to expire, locks with a larger token and
// writes; A resumes and writes with its old token, and the store refuses it;
// A's unlock reports mutex.ErrNotHeld, and B's lock is untouched.
//
//	go run ./examples/fencing
//	go run ./examples/fencing -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//
// Without -nodes it uses 5 embedded Redis nodes started in the process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	// lockName is the lock both holders take.
	lockName = "invoice:7"
	// ttl is A's TTL: short, so that A's lock expires while A is paused, in
	// real time, on embedded and real nodes alike.
	ttl = 300 * time.Millisecond
	// bTTL is B's TTL.
	bTTL = 10 * time.Second
)

func main() {
	// go-redis logs every refused dial to stderr; the lock's errors already
	// name failed nodes, so keep only go-redis's other messages.
	redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial", "changed by hook to CLOSED"}))
	nodes := demo.NodesFlag()
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

// run plays the story on the nodes at urls (embedded ones if empty), prints
// it to out, and returns an error if the store did not refuse the paused
// holder's write or anything else did not go as told.
func run(ctx context.Context, out io.Writer, urls string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, stop, err := demo.URLs(urls, 5)
	if err != nil {
		return err
	}
	defer stop()
	rs, err := demo.Open(ctx, list, redlock.WithKeyPrefix("fencing:"))
	if err != nil {
		return err
	}
	defer rs.Close()

	store := &Store{}
	o, err := play(ctx, out, rs, store)
	if err != nil {
		return err
	}
	value, token := store.Value()
	fmt.Fprintf(out, "\nsummary: the store holds %q (token %d); the paused holder's late write was refused\n", value, token)
	switch {
	case !errors.Is(o.WriteA, ErrStaleToken):
		return fmt.Errorf("the store accepted the paused holder's write: %v", o.WriteA)
	case o.TokenB <= o.TokenA:
		return fmt.Errorf("the token of B (%d) is not larger than that of A (%d)", o.TokenB, o.TokenA)
	case value != valueB:
		return fmt.Errorf("the store holds %q, not B's value", value)
	case !errors.Is(o.UnlockA, mutex.ErrNotHeld):
		return fmt.Errorf("unlock of A: got %v, want mutex.ErrNotHeld", o.UnlockA)
	case o.UnlockB != nil:
		return fmt.Errorf("unlock of B: %w", o.UnlockB)
	}
	return nil
}

// The values the two holders write.
const (
	valueA = "total=100 (by A)"
	valueB = "total=250 (by B)"
)

// outcome is what happened to each holder.
type outcome struct {
	TokenA, TokenB uint64        // their fencing tokens
	BWaited        time.Duration // how long B's LockContext waited for A's lock to expire
	WriteA         error         // A's write after it resumed
	UnlockA        error         // A's UnlockContext after its write
	UnlockB        error         // B's UnlockContext, after A's
}

// play runs the two holders on rs against store and tells the story to out.
// A is a goroutine that the story pauses by leaving it blocked on a channel;
// B runs on the caller's goroutine. It returns an error if a holder could not
// get the lock or B's write failed; the rest is in the outcome.
func play(ctx context.Context, out io.Writer, rs *redlock.Redlock, store *Store) (outcome, error) {
	var o outcome
	// Only A's TTL is short, so that its lock runs out while it is paused;
	// B's is an ordinary one, and B keeps its lock to the end of the story.
	a := rs.NewMutex(lockName, mutex.WithTTL(ttl), mutex.WithFencing())
	b := rs.NewMutex(lockName, mutex.WithTTL(bTTL), mutex.WithFencing())

	if err := a.LockContext(ctx); err != nil {
		return o, fmt.Errorf("holder A: %w", err)
	}
	o.TokenA = a.FencingToken()
	fmt.Fprintf(out, "A: locked %q (TTL %v) with fencing token %d\n", lockName, ttl, o.TokenA)

	paused, resume, aDone := make(chan time.Duration), make(chan struct{}), make(chan struct{})
	go func() { // holder A
		defer close(aDone)
		// A checks that its lock is still valid, as careful code does before
		// acting on it, and is paused right after the check.
		paused <- time.Until(a.Until())
		<-resume
		o.WriteA = store.Write(o.TokenA, valueA)
		// The lock's own verdict: it expired while A was paused.
		o.UnlockA = a.UnlockContext(context.WithoutCancel(ctx))
	}()
	fmt.Fprintf(out, "A: its lock is valid for another %v; about to write, A is paused (a GC pause, a stopped VM)\n",
		(<-paused).Round(time.Millisecond))

	start := time.Now()
	if err := b.LockContext(ctx); err != nil {
		close(resume)
		<-aDone
		return o, fmt.Errorf("holder B: %w", err)
	}
	o.BWaited, o.TokenB = time.Since(start), b.FencingToken()
	fmt.Fprintf(out, "B: waited %v for A's lock to expire, locked it with fencing token %d\n", o.BWaited.Round(time.Millisecond), o.TokenB)
	if err := store.Write(o.TokenB, valueB); err != nil {
		close(resume)
		<-aDone
		return o, fmt.Errorf("write of B: %w", err)
	}
	fmt.Fprintf(out, "B: wrote %q with token %d: accepted\n", valueB, o.TokenB)

	fmt.Fprintf(out, "A: resumes, still believing it holds the lock, and writes %q with token %d\n", valueA, o.TokenA)
	close(resume)
	<-aDone
	fmt.Fprintf(out, "A's write: %v\n", o.WriteA)
	fmt.Fprintf(out, "A: UnlockContext: %v\n   errors.Is(err, mutex.ErrNotHeld) = %v: A learns its lock had expired; B's lock is left alone\n",
		o.UnlockA, errors.Is(o.UnlockA, mutex.ErrNotHeld))

	o.UnlockB = b.UnlockContext(ctx)
	fmt.Fprintf(out, "B: UnlockContext: %v\n", errOK(o.UnlockB))
	return o, nil
}

func errOK(err error) string {
	if err == nil {
		return "ok, its lock was intact"
	}
	return err.Error()
}
