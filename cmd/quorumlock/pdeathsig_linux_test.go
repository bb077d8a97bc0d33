package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// On Linux, CMD dies with a quorumlock killed with SIGKILL, which can stop
// nothing itself: else CMD would go on beside the next holder once the lock
// expired.
func TestCMDDiesWithAKilledQuorumlock(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	for _, args := range [][]string{{"run", "job:orphan-run"}, {"elect", "job:orphan-elect", "a"}} {
		p := start(t, env, append(append(args, "--"), helperCmd("hold", "-pid")...)...)
		p.expect("holding job:orphan")
		pid, err := strconv.Atoi(strings.TrimPrefix(p.expect("pid "), "pid "))
		require.NoError(t, err)
		require.NoError(t, p.cmd.Process.Kill())
		// Without the parent-death signal CMD waits for its stdin, which
		// this test holds open until its cleanup.
		require.True(t, gone(t, pid), "%s: CMD outlived quorumlock", args[0])
		require.Equal(t, -1, p.wait(), "SIGKILL ended quorumlock") // CMD held its stdout
	}
}

// The parent-death signal follows the thread that forked CMD, and a
// goroutine that ends locked to its thread ends the thread: startCMD forks
// CMD on a thread of its own, which it keeps for CMD's life, so CMD outlives
// the thread it was started from.
func TestCMDOutlivesTheThreadThatStartedIt(t *testing.T) {
	c := exec.Command(helperCmd("hold")[0], "hold")
	c.Env = append(os.Environ(), helperEnv+"=1")
	c.Stdout = io.Discard
	stdin, err := c.StdinPipe()
	require.NoError(t, err)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithQuorumlock(c.SysProcAttr)
	var done <-chan error
	onEndingThread(t, func() {
		done, err = startCMD(c)
	})
	require.NoError(t, err)
	// CMD ran none of its code since the thread ended if the kernel killed
	// it then: its answer shows it alive.
	_, err = io.WriteString(stdin, "\n")
	require.NoError(t, err)
	require.NoError(t, <-done, "CMD died with the thread it was started from")
}

// onEndingThread runs f in a goroutine locked to a thread that ends with it,
// and returns once that thread has ended.
func onEndingThread(t *testing.T, f func()) {
	t.Helper()
	tid := make(chan int, 1)
	var run func()
	run = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if syscall.Gettid() == os.Getpid() {
			// The runtime keeps the main thread; another goroutine cannot
			// have it while this one holds it.
			var other sync.WaitGroup
			other.Go(run)
			other.Wait()
			runtime.UnlockOSThread()
			return
		}
		f()
		tid <- syscall.Gettid()
	}
	go run()
	task := "/proc/self/task/" + strconv.Itoa(<-tid)
	deadline := time.Now().Add(waitFor)
	for {
		if _, err := os.Stat(task); errors.Is(err, fs.ErrNotExist) {
			return
		}
		require.True(t, time.Now().Before(deadline), "thread %s did not end", task)
		time.Sleep(time.Millisecond) // nothing signals a thread's end
	}
}
