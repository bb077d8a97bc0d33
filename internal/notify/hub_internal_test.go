package notify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func woken(w *Waiter) bool     { return signalled(w.Wake()) }
func rechecked(w *Waiter) bool { return signalled(w.Recheck()) }

func signalled(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// newTestHub returns a hub of three nodes whose clients have no pub/sub, so
// no connection is opened, on c.
func newTestHub(c clock.Clock) *Hub {
	nodes := []*node.Node{node.New(nil, "a", c), node.New(nil, "b", c), node.New(nil, "c", c)}
	return NewHub(nodes, c)
}

const ch = "quorumlock:released:k" // the release channel of key "k"

// The hub's rules: a release wakes the waiter the nodes name, once, when a
// majority of nodes announced it; the first copy is enough while fewer than
// a majority listen; the first confirmation asks everyone to recheck once,
// and so does one that comes again after a reconnection.
func TestHubWakesTheNamedWaiterOncePerRelease(t *testing.T) {
	h := newTestHub(clock.Real())
	first, second := h.Wait("w1", ch), h.Wait("w2", ch)
	defer first.Stop()
	defer second.Stop()

	h.confirm(0, nil)
	assert.True(t, rechecked(first), "the first confirmation asks every waiter to look again")
	assert.True(t, rechecked(second))
	assert.False(t, woken(first), "as a recheck, not a wake-up")
	h.message("r t1 w2 k")
	assert.True(t, woken(second), "one node of three listens: its copy is enough")
	assert.False(t, woken(first), "only the one named")

	h.confirm(1, nil)
	h.confirm(2, nil)
	assert.False(t, woken(first), "later confirmations wake nobody")
	assert.False(t, rechecked(first), "nor ask for a recheck")
	h.message("r t2 w1 k")
	assert.False(t, woken(first), "one copy of three is not a majority")
	h.message("r t2 w1 k")
	assert.True(t, woken(first), "the second copy is")
	h.message("r t2 w1 k")
	assert.False(t, woken(first), "the third copy of the same release wakes nobody")
	assert.False(t, woken(second))

	h.message("r t3 w1 other key")
	h.message("r t3 w1 other key")
	assert.False(t, woken(first), "a release of another key wakes nobody waiting for this one")

	h.message("r t4  k")
	h.message("r t4  k")
	assert.False(t, woken(first), "nobody queued on the nodes: nobody is named, nobody goes")
	assert.False(t, woken(second))

	h.message("r t5  k")
	h.message("r t5 w2 k")
	assert.True(t, woken(second), "a node with an empty queue names no one: it does not outvote one that names w2")
	assert.False(t, woken(first))

	h.message("t w2 k")
	assert.True(t, woken(second), "a turn message wakes the one named at once")
	assert.False(t, woken(first))

	h.confirm(1, nil)
	assert.True(t, rechecked(first), "a node confirms again after a reconnection: releases were missed")
	assert.True(t, rechecked(second))
}

// A waiter's attempt queues it on the nodes before it joins the hub's queue:
// a release that names it in between is not lost.
func TestHubKeepsAWakeUpForAWaiterAboutToJoin(t *testing.T) {
	h := newTestHub(clock.Real())
	w := h.Wait("w1", ch)
	defer w.Stop()
	h.confirm(0, nil)
	h.confirm(1, nil)
	h.message("t w2 k")
	h.message("r t1 w3 k")
	h.message("r t1 w3 k")
	late, other := h.Wait("w3", ch), h.Wait("w4", ch)
	defer late.Stop()
	defer other.Stop()
	assert.True(t, woken(late), "named before it joined: woken as it joins")
	assert.False(t, woken(other), "never named")
	assert.False(t, woken(w))
	assert.Equal(t, 3, h.Waiting(ch))
}

func TestHubLocalReleaseWakesAtOnceAndIgnoresTheCopies(t *testing.T) {
	h := newTestHub(clock.Real())
	id := h.NewID() // a local release concerns this hub's own waiters only
	w := h.Wait(id, ch)
	defer w.Stop()
	h.confirm(0, nil)
	h.confirm(1, nil)
	<-w.Recheck()
	h.Released(ch, "t1", id)
	assert.True(t, woken(w))
	h.message("r t1 " + id + " k")
	h.message("r t1 " + id + " k")
	assert.False(t, woken(w), "the nodes' copies of a local release are ignored")
	assert.Equal(t, 1, h.Waiting(ch))

	h.Released(ch, "t2", "other.w2")
	other := h.Wait("other.w2", ch)
	defer other.Stop()
	assert.False(t, woken(other), "a head of another process is not kept for a waiter about to join")
}

// A node whose subscription was confirmed just after the release was
// published on it never sends its copy: with two of three nodes listening,
// one copy is all that comes. The waiter is still woken once the other
// copies are overdue, instead of waiting for its fallback timer.
func TestHubWakesWhenTheMajorityOfCopiesNeverComes(t *testing.T) {
	fake := clock.NewFake(time.Now())
	h := newTestHub(fake)
	w := h.Wait("w1", ch)
	defer w.Stop()
	h.confirm(0, nil)
	h.confirm(1, nil)
	assert.True(t, rechecked(w), "the first confirmation")

	h.message("r t1 w1 k")
	assert.False(t, woken(w), "one copy of three, two listening: the second may still come")
	assert.Equal(t, 1, fake.Timers())
	fake.Advance(lateCopies)
	select {
	case <-w.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never woken")
	}

	// When the majority does come, the overdue check wakes nobody again.
	h.message("r t2 w1 k")
	h.message("r t2 w1 k")
	assert.True(t, woken(w))
	fake.Advance(lateCopies)
	_ = h.Waiting(ch) // takes the hub's mutex: the overdue check, if it ran, has returned
	assert.False(t, woken(w), "woken once per release")
}

// A watcher shares a key's queue with its waiters: it is woken by what the
// key's own channel carries, never by a release, and is not counted as
// waiting.
func TestHubWatcherIsWokenByItsChannelAlone(t *testing.T) {
	h := newTestHub(clock.Real())
	watch, w := h.Watch(ch), h.Wait("w1", ch)
	defer w.Stop()
	assert.Equal(t, 1, h.Waiting(ch), "the watcher is not a waiting call")
	h.confirm(0, nil)
	h.message("t w1 k")
	assert.True(t, woken(w))
	assert.False(t, woken(watch), "a turn is not for watchers")
	h.watched(ch)
	assert.True(t, woken(watch), "a message on the key's channel wakes the watcher")
	assert.False(t, woken(w), "and not the waiters")
	watch.Stop()
	watch.Stop()
	assert.Equal(t, 1, h.Waiting(ch))
}

// A confirmation that the goroutine of a session closed since delivers late
// (the connections closed when idle and reopened) is not the new session's:
// it neither counts that node as listening nor asks for a recheck.
func TestHubIgnoresAConfirmationOfAClosedSession(t *testing.T) {
	h := newTestHub(clock.Real())
	w := h.Wait("w1", ch)
	defer w.Stop()
	closed := &session{}
	h.confirm(0, closed)
	assert.False(t, rechecked(w), "a closed session's confirmation asks for no recheck")
	h.mu.Lock()
	listening := h.listening
	h.mu.Unlock()
	assert.Zero(t, listening, "nor counts the node as listening")
	h.confirm(0, nil) // the open session's (none: these nodes have no pub/sub client)
	assert.True(t, rechecked(w))
}
