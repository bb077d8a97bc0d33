//go:build linux

package safety_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A holder process paused past its validity: what Redlock cannot prevent, and
// what fencing tokens do about it. The holder is a child process (this test
// binary re-executed, running TestPausedHolderChild) that keeps a 1s lock
// alive with automatic renewals and "writes" to a resource every 10ms for as
// long as Lost is not closed. The parent stops it with SIGSTOP, takes the lock
// once the child's keys have expired, and lets the child run again. Every
// record is stamped on CLOCK_MONOTONIC, which both processes share.

const (
	pausedName = "paused:holder"
	pausedTTL  = time.Second

	// pausedWait bounds each wait of the parent for the child, and the
	// child's own run.
	pausedWait = 10 * time.Second

	envPausedAddrs = "QUORUMLOCK_PAUSED_CHILD_ADDRS"
)

// childRecord is one line the child wrote to its record pipe:
//
//	ready <token> <mono>       the lock is held, with this fencing token
//	write <token> <mono>       a write to the resource, under the token
//	lost <mono> <isErrLost> <cause...>  Lost was closed; LostCause
//	unlock <isErrNotHeld>      what UnlockContext returned afterwards
type childRecord struct {
	kind   string
	token  uint64
	mono   int64
	isErr  bool   // lost: the cause matches ErrLost; unlock: ErrNotHeld
	detail string // lost: the cause
}

func parseChildRecord(t *testing.T, line string) childRecord {
	t.Helper()
	f := strings.Fields(line)
	require.NotEmpty(t, f, "empty record")
	r := childRecord{kind: f[0]}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "record %q", line)
		return v
	}
	switch {
	case (r.kind == "ready" || r.kind == "write") && len(f) == 3:
		r.token, r.mono = uint64(num(f[1])), num(f[2])
	case r.kind == "lost" && len(f) >= 3:
		r.mono, r.isErr, r.detail = num(f[1]), f[2] == "true", strings.Join(f[3:], " ")
	case r.kind == "unlock" && len(f) == 2:
		r.isErr = f[1] == "true"
	default:
		t.Fatalf("malformed record %q", line)
	}
	return r
}

// recordReader reads the child's records from the read end of a pipe, each
// read bounded by a deadline, so no goroutine is needed to wait on the child.
type recordReader struct {
	t   *testing.T
	f   *os.File
	br  *bufio.Reader
	all []childRecord
}

// next returns the next record, or ok == false at the end of the stream (the
// child has exited). It fails the test if none comes within pausedWait.
func (r *recordReader) next() (rec childRecord, ok bool) {
	r.t.Helper()
	require.NoError(r.t, r.f.SetReadDeadline(time.Now().Add(pausedWait)))
	line, err := r.br.ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		r.t.Fatalf("no record from the child within %v (records so far: %d)", pausedWait, len(r.all))
	}
	if errors.Is(err, io.EOF) {
		require.Empty(r.t, line, "the child's last record is cut short")
		return childRecord{}, false
	}
	require.NoError(r.t, err, "reading the child's records")
	rec = parseChildRecord(r.t, strings.TrimSuffix(line, "\n"))
	r.all = append(r.all, rec)
	return rec, true
}

func TestPausedHolder(t *testing.T) {
	servers := redistest.Start(t, 3)
	dir := t.TempDir()

	records, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = records.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolderChild$", "-test.count=1", "-test.timeout=2m", "-test.v")
	cmd.Env = append(os.Environ(), envPausedAddrs+"="+strings.Join(redistest.Addrs(servers), ","))
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(dir, "child.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	_ = w.Close() // the child has its own copy: EOF once it exits
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	var waitErr error // read once exited is closed
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		// Only this pid: resume it if stopped, then end it.
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	childLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	rd := &recordReader{t: t, f: records, br: bufio.NewReader(records)}

	// 1. The child holds the lock.
	ready, ok := rd.next()
	require.True(t, ok, "the child exited before holding the lock:\n%s", childLog())
	require.Equal(t, "ready", ready.kind, "first record")
	childToken := ready.token
	require.Positive(t, childToken, "the child's lock has a fencing token")

	// 2. Renewals keep it past its TTL: wait until the child has been writing
	// for 1.5 TTLs, still holding the lock.
	heldUntil := ready.mono + (pausedTTL * 3 / 2).Nanoseconds()
	for {
		rec, ok := rd.next()
		require.True(t, ok, "the child exited while it should hold the lock:\n%s", childLog())
		require.Equal(t, "write", rec.kind, "the child lost its lock before being paused: %s", rec.detail)
		if rec.mono >= heldUntil {
			break
		}
	}
	parent, err := redlock.New(clientsOf(t, servers), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	probe := parent.NewMutex(pausedName, mutex.WithFencing())
	err = probe.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained, "1.5 TTLs after it took the lock, the child still holds it: renewals work")
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)

	// 3. Pause the child; its renewals stop, its keys expire, and a second
	// client gets the lock.
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.NoError(t, awaitStopped(pid, true))
	stoppedAt := monoNow()
	m := parent.NewMutex(pausedName, mutex.WithTTL(30*time.Second), mutex.WithFencing(),
		mutex.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
	lockCtx, cancel := context.WithTimeout(t.Context(), pausedWait)
	defer cancel()
	require.NoError(t, m.LockContext(lockCtx), "the paused child's keys expired: the lock is free")
	parentAt := monoNow()
	parentToken := m.FencingToken()
	contAt := monoNow() // before the signal: the child may run before Kill returns
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	// 4. The child resumes, sees the loss, and exits.
	var lost, unlock *childRecord
	for {
		rec, ok := rd.next()
		if !ok {
			break
		}
		switch rec.kind {
		case "lost":
			lost = &rec
		case "unlock":
			unlock = &rec
		}
	}
	select {
	case <-exited:
		require.NoError(t, waitErr, "the child failed:\n%s", childLog())
	case <-time.After(pausedWait):
		t.Fatalf("the child did not exit after its records ended:\n%s", childLog())
	}

	assert.Greater(t, parentToken, childToken, "the new holder's fencing token is larger")
	require.NotNil(t, lost, "the child never reported the loss:\n%s", childLog())
	assert.True(t, lost.isErr, "the child's LostCause matches ErrLost: %s", lost.detail)
	assert.Greater(t, lost.mono, contAt, "the child saw the loss once it ran again")
	if assert.NotNil(t, unlock, "the child reported its UnlockContext") {
		assert.True(t, unlock.isErr, "the child's UnlockContext returned ErrNotHeld")
	}

	// A resource that checks fencing tokens: it has seen the parent's token
	// since parentAt, so it refuses every write made after that under an
	// older token. The child did nothing while it was stopped.
	store := fencingResource{}
	var before, late int
	for _, rec := range rd.all {
		if rec.kind != "write" {
			continue
		}
		assert.False(t, rec.mono > stoppedAt && rec.mono < contAt,
			"a write while the child was stopped: at stop%+v (lock at stop%+v, resumed at stop%+v)",
			durationNs(rec.mono-stoppedAt), durationNs(parentAt-stoppedAt), durationNs(contAt-stoppedAt))
		assert.Equal(t, childToken, rec.token)
		if rec.mono < parentAt {
			before++
			assert.True(t, store.write(rec.token), "a write before the parent got the lock is accepted")
			continue
		}
		if late == 0 {
			require.True(t, store.write(parentToken), "the parent's first write")
		}
		late++
		assert.Less(t, rec.token, parentToken, "a late write of the child carries the older token")
		assert.False(t, store.write(rec.token), "the resource refuses the child's late write")
	}
	assert.Positive(t, before)
	t.Logf("child token %d, parent token %d; the child wrote %d times before the parent got the lock and %d times after it (refused by fencing) before it saw the loss; cause: %s",
		childToken, parentToken, before, late, lost.detail)

	require.NoError(t, m.ExtendContext(t.Context()), "the child's Unlock left the parent's lock intact")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// fencingResource accepts a write only if its token is at least the largest
// it has accepted.
type fencingResource struct{ highest uint64 }

func (r *fencingResource) write(token uint64) bool {
	if token < r.highest {
		return false
	}
	r.highest = token
	return true
}

func clientsOf(t *testing.T, servers []*redistest.Server) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = failFastClient(t, s.Addr())
	}
	return clients
}

// TestPausedHolderChild is the holder process of TestPausedHolder; run
// directly, it does nothing. It writes its records to fd 3.
func TestPausedHolderChild(t *testing.T) {
	addrs := os.Getenv(envPausedAddrs)
	if addrs == "" {
		t.Skip("runs only as a child process of TestPausedHolder")
	}
	out := os.NewFile(3, "records")
	require.NotNil(t, out)
	defer out.Close()
	emit := func(format string, args ...any) {
		_, err := fmt.Fprintf(out, format+"\n", args...)
		require.NoError(t, err)
	}

	clients := make([]redis.UniversalClient, 0, 3)
	for _, a := range strings.Split(addrs, ",") {
		clients = append(clients, failFastClient(t, a))
	}
	rs, err := redlock.New(clients, redlock.WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	m := rs.NewMutex(pausedName, mutex.WithTTL(pausedTTL), mutex.WithAutoExtend(), mutex.WithFencing())
	ctx, cancel := context.WithTimeout(t.Context(), pausedWait)
	defer cancel()
	require.NoError(t, m.LockContext(ctx))
	token := m.FencingToken()
	emit("ready %d %d", token, monoNow())

	lost := m.Lost()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.NewTimer(6 * pausedWait) // the parent pauses the child within seconds
	defer giveUp.Stop()
	for {
		select {
		case <-lost:
			cause := m.LostCause()
			emit("lost %d %t %s", monoNow(), errors.Is(cause, mutex.ErrLost), strings.ReplaceAll(fmt.Sprint(cause), "\n", " "))
			unlockCtx, cancel := context.WithTimeout(context.Background(), pausedWait)
			defer cancel()
			emit("unlock %t", errors.Is(m.UnlockContext(unlockCtx), mutex.ErrNotHeld))
			return
		case <-tick.C:
			select {
			case <-lost:
				continue // handled above
			default:
			}
			emit("write %d %d", token, monoNow())
		case <-giveUp.C:
			t.Fatal("the lock was never lost")
		}
	}
}

// awaitStopped waits, at most pausedWait, until every thread of process pid
// is stopped (state T in /proc/PID/task/TID/stat) or none is, as stopped
// says. A signal takes effect on each thread asynchronously, and the state of
// /proc/PID/stat is only the main thread's, which a Go program may have
// parked while others still run. The kernel offers no notification for this
// that could be used alongside the Wait already running on the process, so
// this polls, every millisecond.
func awaitStopped(pid int, stopped bool) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	deadline := time.Now().Add(pausedWait)
	for {
		done, err := allThreads(dir, stopped)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: threads still not stopped=%t after %v", pid, stopped, pausedWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreads reports whether every thread listed under dir (a
// /proc/PID/task directory) is stopped, or none is, as stopped says.
func allThreads(dir string, stopped bool) (bool, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		path := filepath.Join(dir, task.Name(), "stat")
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return false, err
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("%s: unexpected content %q", path, b)
		}
		if state := b[i+2]; (state == 'T' || state == 't') != stopped {
			return false, nil
		}
	}
	return true, nil
}
