package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// freshQuarantine is the restart quarantine of the tests of a process that
// meets the nodes for the first time; the holder's TTL is no longer, as the
// quarantine requires.
const freshQuarantine = 2 * time.Second

// agedPast waits until every server has been up for at least d, so that a
// process meeting them for the first time does not quarantine them for
// having started recently.
func agedPast(t testing.TB, d time.Duration, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		c := s.Client(t)
		require.Eventually(t, func() bool {
			info, err := c.Info(t.Context(), "server").Result()
			if err != nil { // a busy machine: asked again
				return false
			}
			for line := range strings.Lines(info) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
					secs, err := strconv.Atoi(v)
					return err == nil && time.Duration(secs)*time.Second >= d
				}
			}
			return false
		}, d+10*time.Second, 50*time.Millisecond)
	}
}

// freshSet is a node set of a process that never met the nodes: new clients,
// the restart quarantine on.
func freshSet(t testing.TB, clients []redis.UniversalClient) *redlock.Redlock {
	t.Helper()
	return newSet(t, clients, redlock.WithNodeTimeout(time.Second), redlock.WithRestartQuarantine(freshQuarantine))
}

// A holds a lock on 5 nodes, all up longer than the quarantine; 3 of them
// lose their keys; a process that meets the nodes only now, with the
// quarantine on, must be refused while A's validity lasts: the 2 nodes that
// kept their data show the set's older marker, so the 3 others are
// quarantined. The error says so, node by node.
func TestFreshProcessIsNotAdmittedByNodesThatLostTheirKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lose makes nodes 0, 1 and 2 lose A's key and returns the clients
		// the fresh process reaches the set with; spare are three servers
		// started with the set's, empty.
		lose func(t *testing.T, b *backend, spare []*redistest.Server) []redis.UniversalClient
	}{
		{"flushall", func(t *testing.T, b *backend, spare []*redistest.Server) []redis.UniversalClient {
			flushAll(t, b, 0, 1, 2)
			return redistest.Clients(t, b.real)
		}},
		// Refused before this issue too: the restarted nodes are younger
		// than the quarantine.
		{"empty restart", func(t *testing.T, b *backend, spare []*redistest.Server) []redis.UniversalClient {
			for _, i := range []int{0, 1, 2} {
				b.real[i].RestartEmpty()
			}
			return redistest.Clients(t, b.real)
		}},
		// Empty servers up longer than the quarantine take the place of
		// nodes 0, 1 and 2 (a failover to an empty standby).
		{"empty replacement", func(t *testing.T, b *backend, spare []*redistest.Server) []redis.UniversalClient {
			return redistest.Clients(t, append(spare, b.real[3], b.real[4]))
		}},
		// Another process met the flushed nodes first and made their
		// markers again: present, but younger than the set's.
		{"marker remade by another process", func(t *testing.T, b *backend, spare []*redistest.Server) []redis.UniversalClient {
			flushAll(t, b, 0, 1, 2)
			other := freshSet(t, redistest.Clients(t, b.real)).NewMutex("another-name", mutex.WithTTL(freshQuarantine))
			require.ErrorIs(t, other.TryLockContext(t.Context()), mutex.ErrQuarantined)
			other.Settle()
			for _, i := range []int{0, 1, 2} {
				require.NotEmpty(t, b.get(t, i, "quorumlock:node"), "node %d's marker was made again", i)
			}
			return redistest.Clients(t, b.real)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := realBackend(t, 5)
			spare := redistest.Start(t, 3)
			agedPast(t, freshQuarantine, append(spare, b.real...)...)
			a := b.set(t, redlock.WithRestartQuarantine(freshQuarantine)).NewMutex("fresh", mutex.WithTTL(freshQuarantine))
			require.NoError(t, a.LockContext(t.Context()))
			a.Settle()
			require.Equal(t, 5, b.holders(t, "fresh", a.Value()))

			m := freshSet(t, tc.lose(t, b, spare)).NewMutex("fresh", mutex.WithTTL(freshQuarantine))
			err := m.TryLockContext(t.Context())
			require.True(t, time.Now().Before(a.Until()), "A's validity lasts")
			m.Settle()
			require.ErrorIs(t, err, mutex.ErrNotObtained, "A still holds the lock")
			require.ErrorIs(t, err, mutex.ErrQuarantined)
			assert.GreaterOrEqual(t, quarantined(err), 1)
			assert.Regexp(t, `nodes failed \(\d in restart quarantine\)`, err.Error())
			assert.NotContains(t, err.Error(), "held by another owner")
		})
	}
}

// A brand-new set (no node has a marker yet) is not quarantined: its nodes
// count at once for the first process, and for a second one that meets them
// within the quarantine, since the first made every marker at once.
func TestBrandNewSetIsNotQuarantined(t *testing.T) {
	b := realBackend(t, 5)
	agedPast(t, freshQuarantine, b.real...)
	for p := range 2 {
		m := freshSet(t, redistest.Clients(t, b.real)).NewMutex("brand-new", mutex.WithTTL(freshQuarantine))
		require.NoError(t, m.TryLockContext(t.Context()), "process %d", p)
		require.NoError(t, m.UnlockContext(t.Context()))
	}
}

// One process's first locks on a brand-new set (here a new key prefix on
// long-running nodes), many at once on different names and through several
// Redlocks, make every node's marker in one acquisition (the first; the
// others wait for it to end): none is quarantined, in this process or in
// one that meets the nodes next. Made by several acquisitions, the later
// markers kept their nodes out, a majority of them in about 1 round of 5.
func TestFirstLocksOfAProcessAtOnceMakeTheMarkersInOneAcquisition(t *testing.T) {
	b := realBackend(t, 5)
	agedPast(t, freshQuarantine, b.real...)
	for round := range 20 {
		prefix := fmt.Sprintf("first%d:", round) // a brand-new set: no markers
		fresh := func() *redlock.Redlock {
			return newSet(t, redistest.Clients(t, b.real), redlock.WithKeyPrefix(prefix),
				redlock.WithNodeTimeout(time.Second), redlock.WithRestartQuarantine(freshQuarantine))
		}
		require.NoError(t, lockAtOnce(t, 32, "first-", fresh(), fresh(), fresh(), fresh()), "round %d", round)
		maker := func(i int) string { s, _, _ := strings.Cut(b.get(t, i, prefix+"quorumlock:node"), ":"); return s }
		for i := range 5 {
			require.Equal(t, maker(0), maker(i), "round %d: node %d's marker", round, i)
		}
		m := fresh().NewMutex("next", mutex.WithTTL(freshQuarantine))
		require.NoError(t, m.TryLockContext(t.Context()), "round %d: a process meeting the nodes next", round)
		require.NoError(t, m.UnlockContext(t.Context()))
	}
}

// lockAtOnce has n goroutines lock and unlock a name each (prefix and a
// number), at once, through sets in turn, with a TTL of freshQuarantine,
// and returns their errors joined, once every node has run their commands.
func lockAtOnce(t *testing.T, n int, prefix string, sets ...*redlock.Redlock) error {
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for g := range errs {
		m := sets[g%len(sets)].NewMutex(fmt.Sprint(prefix, g), mutex.WithTTL(freshQuarantine))
		wg.Go(func() {
			<-start
			if errs[g] = m.TryLockContext(t.Context()); errs[g] == nil {
				errs[g] = m.UnlockContext(t.Context())
			}
			m.Settle()
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

// What remains possible: when every node lost its data at once, nothing
// shows that the set existed, and a process meeting the nodes for the first
// time counts those up longer than the quarantine. A client that had met
// the nodes sees every marker changed, and is refused.
func TestFreshProcessCannotTellEveryNodeEmptiedAtOnce(t *testing.T) {
	b := realBackend(t, 5)
	agedPast(t, freshQuarantine, b.real...)
	met := b.set(t, redlock.WithRestartQuarantine(freshQuarantine))
	a := met.NewMutex("all-gone", mutex.WithTTL(freshQuarantine))
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle()
	flushAll(t, b, 0, 1, 2, 3, 4)
	refused := met.NewMutex("all-gone", mutex.WithTTL(freshQuarantine))
	require.ErrorIs(t, refused.TryLockContext(t.Context()), mutex.ErrQuarantined, "the client that met the nodes")
	refused.Settle()
	m := freshSet(t, redistest.Clients(t, b.real)).NewMutex("all-gone", mutex.WithTTL(freshQuarantine))
	require.NoError(t, m.TryLockContext(t.Context()), "a brand-new set, as far as it can tell")
	require.True(t, time.Now().Before(a.Until()), "while A's validity lasts: two owners")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// Processes that meet a brand-new set at once may make its markers in two
// acquisitions: the nodes with the later ones are kept out, for the
// quarantine, by the processes that meet them next. Here one process
// reaches nodes 0 to 2 only, another 3 and 4 only; a third, meeting node 1
// to 4 (0 is down), finds 3 and 4 quarantined and no majority.
func TestLaterMarkersOfABrandNewSetAreQuarantined(t *testing.T) {
	b := realBackend(t, 5)
	agedPast(t, freshQuarantine, b.real...)
	for _, nodes := range [][]int{{0, 1, 2}, {3, 4}} {
		m := freshSet(t, b.reaching(t, nodes...)).NewMutex(fmt.Sprint("makes markers on ", nodes), mutex.WithTTL(freshQuarantine))
		if m.TryLockContext(t.Context()) == nil { // a majority or not, the markers are made
			require.NoError(t, m.UnlockContext(t.Context()))
		}
		m.Settle()
	}
	maker := func(i int) string { s, _, _ := strings.Cut(b.get(t, i, "quorumlock:node"), ":"); return s }
	require.Equal(t, maker(0), maker(2))
	require.Equal(t, maker(3), maker(4))
	require.NotEmpty(t, maker(3))
	require.NotEqual(t, maker(0), maker(3), "made by two acquisitions")
	b.real[0].Kill()
	m := freshSet(t, redistest.Clients(t, b.real)).NewMutex("later-markers", mutex.WithTTL(freshQuarantine))
	err := m.TryLockContext(t.Context())
	m.Settle()
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	assert.Equal(t, 2, quarantined(err), "nodes 3 and 4")
	assert.ErrorContains(t, err, "its restart marker was made after another node's: it lost its data since, was not reached when that one was made, or another process meeting the brand-new set at the same moment made it")
	assert.NotContains(t, err.Error(), "restarted", "nothing restarted")
}

// A brand-new set with a node that never answers: the nodes met first
// cannot be judged before every node has answered or failed, so they do not
// count in the first attempt, which ends within the per-node timeout; once
// an attempt skips the silent node (it has not answered for longer than
// that), they count.
func TestBrandNewSetWithASilentNode(t *testing.T) {
	b := realBackend(t, 4)
	agedPast(t, freshQuarantine, b.real...)
	hole := newBlackhole(t)
	clients := append(redistest.Clients(t, b.real), closing(t, redis.NewClient(&redis.Options{Addr: hole.addr(), MaxRetries: -1})))
	rs := newSet(t, clients, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithRestartQuarantine(freshQuarantine))
	m := rs.NewMutex("silent", mutex.WithTTL(freshQuarantine))
	var err error
	within(t, 2*time.Second, func() { err = m.TryLockContext(t.Context()) }) // not the client's 3s read timeout
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	assert.ErrorContains(t, err, "too few nodes answered in time to tell whether it lost its data")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.LockContext(ctx), "once the silent node is skipped, the others count")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// envFreshAddrs passes the nodes, comma-separated, to TestFreshProcessChild.
const envFreshAddrs = "QUORUMLOCK_FRESH_ADDRS"

// The same as the flushall case above, with the fresh process a separate OS
// process (this test binary, running TestFreshProcessChild) and the
// quarantine of the issue that found it: 5s.
func TestFreshOSProcessIsNotAdmittedByNodesThatLostTheirKeys(t *testing.T) {
	const d = 5 * time.Second
	b := realBackend(t, 5)
	agedPast(t, d, b.real...)
	a := b.set(t, redlock.WithRestartQuarantine(d)).NewMutex("fresh-os", mutex.WithTTL(d))
	require.NoError(t, a.LockContext(t.Context()))
	a.Settle()
	flushAll(t, b, 0, 1, 2)

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFreshProcessChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envFreshAddrs+"="+strings.Join(b.addrs, ","))
	out, err := cmd.CombinedOutput()
	require.True(t, time.Now().Before(a.Until()), "A's validity lasts")
	require.NoError(t, err, "the child process:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestFreshProcessChild", "the child ran its checks:\n%s", out)
}

// TestFreshProcessChild is the fresh process of
// TestFreshOSProcessIsNotAdmittedByNodesThatLostTheirKeys; run directly, it
// does nothing.
func TestFreshProcessChild(t *testing.T) {
	addrs := os.Getenv(envFreshAddrs)
	if addrs == "" {
		t.Skip("runs only as a child process of TestFreshOSProcessIsNotAdmittedByNodesThatLostTheirKeys")
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(addrs, ",") {
		clients = append(clients, closing(t, redis.NewClient(&redis.Options{Addr: addr})))
	}
	rs := newSet(t, clients, redlock.WithNodeTimeout(time.Second), redlock.WithRestartQuarantine(5*time.Second))
	m := rs.NewMutex("fresh-os", mutex.WithTTL(5*time.Second))
	err := m.TryLockContext(t.Context())
	m.Settle()
	require.ErrorIs(t, err, mutex.ErrNotObtained, "another process holds the lock")
	require.ErrorIs(t, err, mutex.ErrQuarantined)
}
