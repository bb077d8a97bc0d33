package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const envOrphanHelper = "REDISTEST_ORPHAN_HELPER"

// TestOrphanHelper is run by TestServerDiesWithTestBinary in a child test
// binary: it starts a server, reports its address and blocks until killed.
func TestOrphanHelper(t *testing.T) {
	if os.Getenv(envOrphanHelper) != "1" {
		t.Skip("helper process for TestServerDiesWithTestBinary")
	}
	s := StartOne(t)
	fmt.Printf("READY %s\n", s.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills us
}

func TestServerDiesWithTestBinary(t *testing.T) {
	Require(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanHelper$", "-test.count=1", "-test.v")
	// The helper dies by SIGKILL, before its t.TempDir is removed: it makes
	// that under this test's, which is.
	cmd.Env = append(os.Environ(), envOrphanHelper+"=1", "TMPDIR="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "READY %s", &addr); err == nil {
			break
		}
	}
	if addr == "" {
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		t.Fatal("helper did not report a server")
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "server should be up while the helper runs")
	conn.Close()

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	// The kernel SIGKILLs the server (Pdeathsig) when the helper dies. This
	// process is not its parent, so there is nothing to wait on: poll.
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if err == nil { // still up
			conn.Close()
		} // else dying: the connection was reset
		require.True(t, time.Now().Before(deadline),
			"server at %s outlived the test binary that started it (last dial: %v)", addr, err)
		time.Sleep(5 * time.Millisecond)
	}
}
