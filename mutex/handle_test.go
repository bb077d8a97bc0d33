package mutex_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A handle exists only while the Mutex holds, and only for a Mutex on one name.
func TestHandleRefusesAMutexThatDoesNotHold(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	m := rs.NewMutex("h-refuse")
	_, err := m.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "never locked")
	require.NoError(t, m.LockContext(t.Context()))
	_, err = m.Handle()
	require.NoError(t, err)
	require.NoError(t, m.UnlockContext(t.Context()))
	_, err = m.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "released")

	// A release that too few nodes confirmed ended the hold (Done closed):
	// it may land at any moment, so nobody may take the lock over
	// (review 40), though the Mutex keeps the acquisition for a retry.
	rb := realBackend(t, 3)
	unconfirmed := rb.set(t).NewMutex("h-unconfirmed", mutex.WithTTL(time.Minute))
	require.NoError(t, unconfirmed.LockContext(t.Context()))
	rb.kill(1)
	rb.kill(2)
	require.ErrorIs(t, unconfirmed.UnlockContext(t.Context()), mutex.ErrNodesUnavailable)
	<-unconfirmed.Done()
	_, err = unconfirmed.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "released, unconfirmed")

	short := rs.NewMutex("h-short", mutex.WithTTL(50*time.Millisecond))
	require.NoError(t, short.LockContext(t.Context()))
	<-time.After(time.Until(short.Until())) // the validity must end
	_, err = short.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "validity ended")

	multi := rs.NewMultiMutex([]string{"h-a", "h-b"})
	require.NoError(t, multi.LockContext(t.Context()))
	_, err = multi.Handle()
	require.ErrorIs(t, err, mutex.ErrInvalid)
	require.NoError(t, multi.UnlockContext(t.Context()))
	_, err = rs.NewMutex("").Handle()
	require.ErrorIs(t, err, mutex.ErrInvalid)
}

// The resumed Mutex holds the original's acquisition: same token and fencing
// token, an Until no later than the original's, and extensions and releases
// that act on the one lock. Both extend; when one releases, the other's
// Extend finds the lock gone.
func TestResumedMutexHoldsTheSameLock(t *testing.T) {
	b := realBackend(t, 5)
	a := b.set(t).NewMutex("h-same", mutex.WithTTL(5*time.Second), mutex.WithFencing())
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)

	other := b.set(t) // another Redlock on the same nodes, as another process has
	m, err := other.ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	assert.Equal(t, a.Value(), m.Value())
	assert.Equal(t, a.Key(), m.Key())
	require.NotZero(t, a.FencingToken())
	assert.Equal(t, a.FencingToken(), m.FencingToken())
	assert.True(t, time.Now().Before(m.Until()))
	assert.False(t, m.Until().After(a.Until()), "resumed %v, original %v", m.Until(), a.Until())
	assert.ErrorIs(t, other.NewMutex("h-same").TryLockContext(t.Context()), mutex.ErrNotObtained)

	before := m.Until()
	require.NoError(t, m.ExtendContext(t.Context()), "the resumed Mutex extends")
	assert.True(t, m.Until().After(before))
	require.NoError(t, a.ExtendContext(t.Context()), "and so does the original")
	assert.Equal(t, 5, b.holders(t, a.Key(), a.Value()))

	require.NoError(t, m.UnlockContext(t.Context()))
	select {
	case <-m.Done():
	default:
		t.Fatal("the resumed Mutex's Done stays open after its release")
	}
	m.Settle() // the releases a majority did not need to confirm
	assert.Zero(t, b.present(t, a.Key()), "released on every node")
	require.ErrorIs(t, a.ExtendContext(t.Context()), mutex.ErrNotHeld, "the original finds the lock gone")
	select {
	case <-a.Lost():
	default:
		t.Fatal("the original's Lost stays open")
	}
	<-a.Done()
	require.ErrorIs(t, a.UnlockContext(t.Context()), mutex.ErrNotHeld, "found lost before")
	_, err = other.ResumeMutex(t.Context(), h)
	require.ErrorIs(t, err, mutex.ErrNotHeld, "a handle is useless once the lock ended")
	_, err = a.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "a lost acquisition has no handle")
}

// When both release, the second finds the key gone and the tombstone of the
// first one's release, which is not its own: it cannot tell whether another
// owner took the lock and released it in between, so it says ErrNotHeld, as
// its ExtendContext would. The first release's tombstone used to confirm the
// second (nil), also when a third owner had locked and unlocked in between
// (review 30: 5 of 5). Both Done channels close.
func TestBothHoldersOfAHandleRelease(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-both", mutex.WithTTL(5*time.Second), mutex.WithAutoExtend())
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	m, err := b.set(t).ResumeMutex(t.Context(), h, mutex.WithAutoExtend())
	require.NoError(t, err)
	require.NoError(t, a.UnlockContext(t.Context()))
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
	<-a.Done()
	<-m.Done()
	assert.NoError(t, a.LostCause())
	a.Settle()
	m.Settle() // the releases a majority did not need to confirm
	assert.Zero(t, b.present(t, a.Key()))
}

// When another owner took the lock between the two releases, the second
// holder's work may have overlapped that owner's: its release is ErrNotHeld,
// on the first try and on a retry after too few nodes answered, though the
// nodes keep the first release's tombstone: only a Mutex's own tombstones
// confirm its release (review 30: nil, 5 of 5, on the retry).
func TestTheSecondHolderOfAHandleLearnsOfANewOwner(t *testing.T) {
	b := realBackend(t, 3)
	for _, retry := range []bool{false, true} {
		t.Run(fmt.Sprintf("retry %v", retry), func(t *testing.T) {
			name := fmt.Sprintf("h-new-%v", retry)
			a := b.set(t).NewMutex(name, mutex.WithTTL(5*time.Second))
			require.NoError(t, a.LockContext(t.Context()))
			h, err := a.Handle()
			require.NoError(t, err)
			m, err := b.set(t, redlock.WithNodeTimeout(100*time.Millisecond)).ResumeMutex(t.Context(), h)
			require.NoError(t, err)
			require.NoError(t, a.UnlockContext(t.Context()))
			other := b.set(t).NewMutex(name, mutex.WithTTL(5*time.Second))
			require.NoError(t, other.LockContext(t.Context()))
			if retry {
				for _, s := range b.real[1:] {
					s.Pause()
					t.Cleanup(s.Resume)
				}
				require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNodesUnavailable)
				for _, s := range b.real[1:] {
					s.Resume()
				}
			}
			require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
			require.ErrorIs(t, m.LostCause(), mutex.ErrLost)
			require.NoError(t, other.UnlockContext(t.Context()))
		})
	}
}

// The resumed Until comes from the TTL the nodes have left, not from the TTL:
// the longest that a majority has (here two of three keys expire in 1.6s,
// more than the 1s loss margin of the 10s TTL).
func TestResumedUntilFollowsTheNodesRemainingTTL(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-pttl", mutex.WithTTL(10*time.Second))
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle() // the lock returns at a majority; the PEXPIREs below must come after every node's SET
	h, err := a.Handle()
	require.NoError(t, err)
	for i := range 2 {
		require.NoError(t, b.admin[i].PExpire(t.Context(), a.Key(), 1600*time.Millisecond).Err())
	}
	start := time.Now()
	m, err := b.set(t).ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	assert.False(t, m.Until().After(start.Add(1600*time.Millisecond)), "until %v after the keys' expiry", m.Until().Sub(start))
	assert.True(t, m.Until().After(start), "validity left")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A handle whose keys have less left on a majority than the loss margin
// (TTL/10), where a lease is declared lost, is refused as lost: resumed, it
// was declared lost at once, its cause blaming this process (review 14).
// And Handle refuses a Mutex whose own loss deadline passed unrenewed,
// whether or not Lost was looked at.
func TestAHandlePastItsLossDeadlineIsNotHeld(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-late", mutex.WithTTL(time.Second))
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle() // the PEXPIREs below must come after every node's SET
	h, err := a.Handle()
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, b.admin[i].PExpire(t.Context(), a.Key(), 60*time.Millisecond).Err())
	}
	_, err = b.set(t).ResumeMutex(t.Context(), h)
	require.ErrorIs(t, err, mutex.ErrNotHeld, "60ms left of a 1s TTL: under its 100ms loss margin")
	require.ErrorContains(t, err, "loss deadline")

	late := b.set(t).NewMutex("h-late-handle", mutex.WithTTL(100*time.Millisecond))
	require.NoError(t, late.LockContext(t.Context()))
	<-time.After(time.Until(late.Until().Add(-5 * time.Millisecond))) // past Until-TTL/10, before Until
	_, err = late.Handle()
	require.ErrorIs(t, err, mutex.ErrNotHeld, "past its loss deadline, Lost never looked at")
}

// A resumer may not change the lock's TTL (its extensions would move the
// keys' expiry earlier, under the original's validity: another owner could
// get in), and one whose node set allows less clock drift still ends its
// validity no later than the original's.
func TestResumeKeepsTheOriginalsTTLAndDriftAllowance(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-ttl", mutex.WithTTL(10*time.Second))
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle() // the lock returns at a majority; node 0's script may still be on its way
	h, err := a.Handle()
	require.NoError(t, err)
	before := b.scripts(0)
	_, err = b.set(t).ResumeMutex(t.Context(), h, mutex.WithTTL(200*time.Millisecond))
	require.ErrorIs(t, err, mutex.ErrInvalid)
	require.ErrorContains(t, err, "keeps the original's")
	require.Equal(t, before, b.scripts(0), "nothing sent")

	m, err := b.set(t, redlock.WithDriftFactor(0)).ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	assert.False(t, m.Until().After(a.Until()), "resumed %v after the original's", m.Until().Sub(a.Until()))
	h2, err := m.Handle()
	require.NoError(t, err)
	m2, err := b.set(t, redlock.WithDriftFactor(0)).ResumeMutex(t.Context(), h2)
	require.NoError(t, err)
	assert.False(t, m2.Until().After(a.Until()), "resumed twice %v after the original's", m2.Until().Sub(a.Until()))
	require.NoError(t, a.UnlockContext(t.Context()))
}

// A resumer may not change the lock's metadata either (its renewals would
// put another record back where a node lost the key; review 16 saw the
// nodes keep owner=A while the resumed Mutex carried owner=B), nor add one.
func TestResumeKeepsTheOriginalsMetadata(t *testing.T) {
	b := realBackend(t, 3)
	for _, md := range []*string{nil, new("owner=A")} {
		opts := []mutex.Option{mutex.WithTTL(10 * time.Second)}
		if md != nil {
			opts = append(opts, mutex.WithMetadata(*md))
		}
		a := b.set(t).NewMutex("h-md", opts...)
		require.NoError(t, a.LockContext(t.Context()))
		a.Settle()
		h, err := a.Handle()
		require.NoError(t, err)
		before := b.scripts(0)
		_, err = b.set(t).ResumeMutex(t.Context(), h, mutex.WithMetadata("owner=B"))
		require.ErrorIs(t, err, mutex.ErrInvalid, "metadata %v", md)
		require.ErrorContains(t, err, "WithMetadata differs from the lock's")
		require.Equal(t, before, b.scripts(0), "nothing sent")
		if md != nil {
			m, err := b.set(t).ResumeMutex(t.Context(), h, mutex.WithMetadata(*md))
			require.NoError(t, err, "the same metadata")
			m.Settle()
		}
		require.NoError(t, a.UnlockContext(t.Context()))
	}
}

// When the original's acquisition took long (here two of three nodes
// answered 200ms late, and set their keys then), its keys outlive its start
// by more than the TTL; the resumed Until still ends no later than its own.
func TestResumedUntilIsNeverLaterThanTheOriginals(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	a := rs.NewMutex("h-lag", mutex.WithTTL(3*time.Second))
	for i := 1; i < 3; i++ {
		b.real[i].Do(t, "CLIENT", "PAUSE", "200", "ALL")
	}
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	m, err := b.set(t).ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	assert.False(t, m.Until().After(a.Until()), "resumed %v after the original's", m.Until().Sub(a.Until()))
	h2, err := m.Handle() // a handle of the resumed Mutex keeps the argument
	require.NoError(t, err)
	m2, err := b.set(t).ResumeMutex(t.Context(), h2)
	require.NoError(t, err)
	// Not bounded by m's Until: m's read may have decided before the node
	// whose key expires last answered (docs/design.md, "Handles").
	assert.False(t, m2.Until().After(a.Until()), "resumed twice %v after the original's", m2.Until().Sub(a.Until()))
	require.NoError(t, a.UnlockContext(t.Context()))
}

// With WithAutoExtend passed to ResumeMutex, the resumed Mutex keeps the lock
// past the TTL of an original that renews nothing.
func TestResumedMutexAutoExtends(t *testing.T) {
	b := realBackend(t, 3)
	const ttl = 800 * time.Millisecond
	a := b.set(t).NewMutex("h-auto", mutex.WithTTL(ttl))
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	m, err := b.set(t).ResumeMutex(t.Context(), h, mutex.WithAutoExtend())
	require.NoError(t, err)
	<-time.After(2 * ttl) // time must pass: two TTLs, past the original's keys' life
	select {
	case <-m.Lost():
		t.Fatalf("lost: %v", m.LostCause())
	default:
	}
	assert.GreaterOrEqual(t, b.holders(t, a.Key(), a.Value()), 2, "renewed on a majority")
	assert.ErrorIs(t, b.set(t).NewMutex("h-auto").TryLockContext(t.Context()), mutex.ErrNotObtained)
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A malformed or foreign handle is ErrInvalid, and nothing is sent.
func TestResumeRefusesBadHandles(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-bad")
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle() // the lock returns at a majority; node 0's script may still be on its way
	h, err := a.Handle()
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(h, "qlh1."))
	require.NoError(t, err)
	edit := func(from, to string) string {
		return "qlh1." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), from, to, 1)))
	}
	bad := map[string]string{
		"empty":         "",
		"no prefix":     strings.TrimPrefix(h, "qlh1."),
		"not base64":    "qlh1.!!!",
		"not json":      "qlh1." + base64.RawURLEncoding.EncodeToString([]byte("x")),
		"truncated":     h[:len(h)-4],
		"unknown field": edit(`"n":`, `"x":1,"n":`),
		"empty name":    edit(`"n":"h-bad"`, `"n":""`),
		"bad token":     edit(`"t":"`, `"t":"lower`),
		"zero ttl":      edit(`"ttl":8000`, `"ttl":0`),
		"too long":      "qlh1." + strings.Repeat("A", 3*mutex.MaxNameLen),
	}
	sent := b.scripts(0)
	rs := b.set(t)
	for what, h := range bad {
		_, err := rs.ResumeMutex(t.Context(), h)
		require.ErrorIs(t, err, mutex.ErrInvalid, what)
	}
	foreign := map[string]*redlock.Redlock{
		"another key prefix": b.set(t, redlock.WithKeyPrefix("other:")),
		"another node set":   newSet(t, b.clients[:2]),
	}
	for what, rs := range foreign {
		_, err := rs.ResumeMutex(t.Context(), h)
		require.ErrorIs(t, err, mutex.ErrInvalid, what)
		assert.ErrorContains(t, err, "another node set or key prefix", what)
	}
	// A TTL past time.Duration's range is the handle's fault, not WithTTL's
	// (it read "WithTTL(556601h10m5.2s) differs from the lock's TTL,
	// 556601h10m5.2s", with no WithTTL given).
	_, err = rs.ResumeMutex(t.Context(), edit(`"ttl":8000`, `"ttl":1000000000000000000`))
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.ErrorContains(t, err, "malformed handle (a field is missing or out of range)")
	var nilCtx context.Context // the bad input under test
	_, err = rs.ResumeMutex(nilCtx, h)
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.Equal(t, sent, b.scripts(0), "nothing sent")

	reordered := []redis.UniversalClient{b.clients[2], b.clients[0], b.clients[1]}
	m, err := newSet(t, reordered).ResumeMutex(t.Context(), h)
	require.NoError(t, err, "the same nodes in another order are the same set")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A lock that is gone, or taken by another owner, is ErrNotHeld; too few
// nodes, ErrNodesUnavailable.
func TestResumeOfALockThatIsGone(t *testing.T) {
	b := realBackend(t, 5)
	rs := b.set(t)
	a := rs.NewMutex("h-gone", mutex.WithTTL(5*time.Second))
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	b.del(t, a.Key())
	next := rs.NewMutex("h-gone")
	require.NoError(t, next.LockContext(t.Context()))
	_, err = b.set(t).ResumeMutex(t.Context(), h)
	require.ErrorIs(t, err, mutex.ErrNotHeld, "another owner holds it")
	require.NoError(t, next.UnlockContext(t.Context()))

	c := rs.NewMutex("h-gone", mutex.WithTTL(5*time.Second))
	require.NoError(t, c.LockContext(t.Context()))
	h, err = c.Handle()
	require.NoError(t, err)
	for i := range 3 {
		b.kill(i)
	}
	_, err = b.set(t).ResumeMutex(t.Context(), h)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.NotErrorIs(t, err, mutex.ErrNotHeld)
	var ne *mutex.NodeError
	require.ErrorAs(t, err, &ne)
}

// envHandle passes a handle, and envHandleAddrs the nodes, to
// TestResumeChild; envHandleFence the fencing token it must find.
const (
	envHandle      = "QUORUMLOCK_TEST_HANDLE"
	envHandleAddrs = "QUORUMLOCK_TEST_HANDLE_ADDRS"
	envHandleFence = "QUORUMLOCK_TEST_HANDLE_FENCE"
)

// A lock taken in this process is resumed, extended and released by another
// OS process (this test binary, running TestResumeChild); this process then
// finds it gone.
func TestResumeInAnotherOSProcess(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-os", mutex.WithTTL(5*time.Second), mutex.WithFencing(), mutex.WithAutoExtend())
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestResumeChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envHandle+"="+h, envHandleAddrs+"="+strings.Join(b.addrs, ","),
		envHandleFence+"="+strconv.FormatUint(a.FencingToken(), 10))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child process:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestResumeChild", "the child ran its checks:\n%s", out)
	require.ErrorIs(t, a.ExtendContext(t.Context()), mutex.ErrNotHeld, "released by the other process")
	<-a.Lost()
	<-a.Done()
	require.ErrorIs(t, a.UnlockContext(t.Context()), mutex.ErrNotHeld, "found lost before")
}

// TestResumeChild is the other process of TestResumeInAnotherOSProcess; run
// directly, it does nothing.
func TestResumeChild(t *testing.T) {
	h := os.Getenv(envHandle)
	if h == "" {
		t.Skip("runs only as a child process of TestResumeInAnotherOSProcess")
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv(envHandleAddrs), ",") {
		clients = append(clients, closing(t, redis.NewClient(&redis.Options{Addr: addr})))
	}
	rs := newSet(t, clients, redlock.WithNodeTimeout(time.Second))
	m, err := rs.ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	assert.Equal(t, os.Getenv(envHandleFence), strconv.FormatUint(m.FencingToken(), 10))
	require.NoError(t, m.ExtendContext(t.Context()))
	require.NoError(t, m.UnlockContext(context.Background()))
}

// A Mutex with metadata hands it over too: the resumed Mutex renews and
// deletes the record beside the key, as the original would.
func TestResumedMutexKeepsTheMetadata(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	a := rs.NewMutex("h-md", mutex.WithMetadata("host=a pid=1"))
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	m, err := b.set(t).ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	require.NoError(t, m.ExtendContext(t.Context()))
	in, err := rs.Inspect(t.Context(), "h-md")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1)
	assert.Equal(t, "host=a pid=1", in.Locks[0].Metadata)
	require.NoError(t, m.UnlockContext(t.Context()))
	m.Settle()
	assert.Zero(t, b.present(t, a.Key()+":quorumlock:md"), "the record went with the key")
}

// ResumeMutex returns when ctx ends, with its error, even while a majority
// does not answer; nothing is held.
func TestResumeReturnsWhenCtxEnds(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t).NewMutex("h-ctx", mutex.WithTTL(5*time.Second))
	require.NoError(t, a.LockContext(t.Context()))
	h, err := a.Handle()
	require.NoError(t, err)
	rs := b.set(t)
	b.real[1].Pause()
	b.real[2].Pause()
	defer b.real[1].Resume()
	defer b.real[2].Resume()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	var m *mutex.Mutex
	within(t, 500*time.Millisecond, func() { m, err = rs.ResumeMutex(ctx, h) }) // not the 1s per-node timeout
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, mutex.ErrNotHeld)
	assert.Nil(t, m)
}
