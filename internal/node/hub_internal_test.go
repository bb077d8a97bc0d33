package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func woken(w *Waiter) bool {
	select {
	case <-w.Wake():
		return true
	default:
		return false
	}
}

// The hub's rules, with three nodes whose clients have no pub/sub (so no
// connection is opened): a release wakes the head of the queue once, when a
// majority of nodes announced it; the first copy is enough while fewer than
// a majority listen; confirmations wake everyone once.
func TestHubWakesTheHeadOncePerRelease(t *testing.T) {
	h := &hub{nodes: make([]*Node, 3), channels: map[string]*queue{}}
	const ch = "quorumlock:released:k"
	for i := range h.nodes {
		h.nodes[i] = &Node{}
	}
	first, second := h.join(ch), h.join(ch)
	defer second.Stop()

	h.confirmed(ch, 0)
	assert.True(t, woken(first), "the first confirmation wakes every waiter to look again")
	assert.True(t, woken(second))
	h.released(ch, "t1")
	assert.True(t, woken(first), "one node of three listens: its copy is enough")
	assert.False(t, woken(second), "only the head")

	h.confirmed(ch, 1)
	h.confirmed(ch, 2)
	assert.False(t, woken(first), "later confirmations wake nobody")
	h.released(ch, "t2")
	assert.False(t, woken(first), "one copy of three is not a majority")
	h.released(ch, "t2")
	assert.True(t, woken(first), "the second copy is")
	h.released(ch, "t2")
	assert.False(t, woken(first), "the third copy of the same release wakes nobody")
	assert.False(t, woken(second))

	first.Stop()
	h.released(ch, "t3")
	h.released(ch, "t3")
	assert.True(t, woken(second), "the next in line is the head now")
}

func TestHubLocalReleaseWakesAtOnceAndIgnoresTheCopies(t *testing.T) {
	s := &Set{Nodes: []*Node{{}, {}, {}}, Notify: true}
	const ch = "quorumlock:released:k"
	w := s.Wait(ch)
	defer w.Stop()
	s.hub.confirmed(ch, 0)
	s.hub.confirmed(ch, 1)
	<-w.Wake()
	s.Released(ch, "t1")
	assert.True(t, woken(w))
	s.hub.released(ch, "t1")
	s.hub.released(ch, "t1")
	assert.False(t, woken(w), "the nodes' copies of a local release are ignored")
	assert.Equal(t, 1, s.Waiting(ch))
	assert.True(t, s.Queued(ch))
}

// A node whose subscription was confirmed just after the release was
// published on it never sends its copy: with two of three nodes listening,
// one copy is all that comes. The head is still woken, once the other copies
// are overdue, instead of waiting for its fallback timer.
func TestHubWakesTheHeadWhenTheMajorityOfCopiesNeverComes(t *testing.T) {
	h := &hub{nodes: []*Node{{}, {}, {}}, channels: map[string]*queue{}}
	const ch = "quorumlock:released:k"
	w := h.join(ch)
	defer w.Stop()
	h.confirmed(ch, 0)
	h.confirmed(ch, 1)
	assert.True(t, woken(w), "the first confirmation")

	h.released(ch, "t1")
	assert.False(t, woken(w), "one copy of three, two listening: the second may still come")
	select {
	case <-w.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the head was never woken")
	}

	// When the majority does come, the overdue check wakes nobody again.
	h.released(ch, "t2")
	h.released(ch, "t2")
	assert.True(t, woken(w))
	time.Sleep(2 * lateCopies) // no signal exists for "nothing happens"
	assert.False(t, woken(w), "woken once per release")
}

// A head that gives up (its ctx ended) passes its turn on: the new head is
// woken to look at the lock, since the release or expiry it was waiting for
// may have woken only the one that left. A head that got the lock passes
// nothing on: the next in line waits for its release.
func TestHubHeadThatGivesUpWakesTheNext(t *testing.T) {
	h := &hub{nodes: []*Node{{}, {}, {}}, channels: map[string]*queue{}}
	const ch = "quorumlock:released:k"
	first, second, third := h.join(ch), h.join(ch), h.join(ch)
	defer third.Stop()
	second.GiveUp() // not the head: nobody is woken
	assert.False(t, woken(first))
	assert.False(t, woken(third))
	first.GiveUp()
	assert.True(t, woken(third), "the new head looks again")

	fourth := h.join(ch)
	defer fourth.Stop()
	third.Stop() // got the lock
	assert.False(t, woken(fourth), "waits for the release")
}
