package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// readyTimeout bounds the wait for a new server to answer PING.
	readyTimeout = 10 * time.Second

	// pollInterval is the pause between two PING attempts.
	pollInterval = 5 * time.Millisecond

	// probeTimeout bounds one PING attempt (dial, write and read). A server
	// that is up answers in well under a millisecond.
	probeTimeout = time.Second
)

// errExited reports that a process exited before it answered PING.
var errExited = errors.New("redis-server exited before answering PING")

// waitReady polls addr every pollInterval until it answers PING, served by
// process p: INFO's process_id is checked, so that another server that
// happens to hold the port is not mistaken for p. It returns errExited as soon
// as p exits, even in the middle of a probe, and an error once readyTimeout
// has passed.
func waitReady(p *process, addr, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	// Cancel ctx when p exits; this goroutine ends when waitReady returns.
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := probe(ctx, addr, password, p.pid())
		if err == nil {
			return nil
		}
		if p.exited() {
			return errExited
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no answer to PING within %v: %w", readyTimeout, err)
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}

var processIDRE = regexp.MustCompile(`(?m)^process_id:(\d+)\r?$`)

// probe sends [AUTH password,] PING and INFO server to addr on a new
// connection and returns nil if PING got PONG and the server's process_id is
// pid. It gives up after probeTimeout or when ctx is done.
func probe(ctx context.Context, addr, password string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Interrupt the reads and writes below when ctx is done.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var cmds [][]string
	if password != "" {
		cmds = append(cmds, []string{"AUTH", password})
	}
	cmds = append(cmds, []string{"PING"}, []string{"INFO", "server"})
	var req strings.Builder
	for _, c := range cmds {
		writeCommand(&req, c)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	replies := make([]string, len(cmds))
	for i := range cmds {
		if replies[i], err = readReply(r); err != nil {
			return fmt.Errorf("%s: %w", cmds[i][0], err)
		}
	}
	if pong := replies[len(replies)-2]; pong != "PONG" {
		return fmt.Errorf("PING: unexpected reply %q", pong)
	}
	m := processIDRE.FindStringSubmatch(replies[len(replies)-1])
	if m == nil {
		return errors.New("INFO server: no process_id")
	}
	if m[1] != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by pid %s, not by pid %d", addr, m[1], pid)
	}
	return nil
}

// writeCommand appends args to b as a RESP array of bulk strings.
func writeCommand(b *strings.Builder, args []string) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(a), a)
	}
}

// readReply reads one RESP2 simple string, error, integer or bulk string
// reply, which is all probe needs. An error reply is returned as an error.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch kind, rest := line[0], line[1:]; kind {
	case '+', ':':
		return rest, nil
	case '-':
		return "", errors.New(rest)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk length %q", rest)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// AwaitUptime blocks until every server has been up for at least d, as INFO
// server's uptime_in_seconds reports it (whole seconds), and fails the test
// if that takes more than d plus 5s. Tests of the restart quarantine use it
// so that the servers they just started do not count as restarted.
func AwaitUptime(t testing.TB, servers []*Server, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d + 5*time.Second)
	for _, s := range servers {
		for {
			info, _ := s.Do(t, "INFO", "server").(string)
			_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
			secs, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
			if err == nil && time.Duration(secs)*time.Second >= d {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: %s not up for %v within %v", s.Addr(), d, d+5*time.Second)
			}
			time.Sleep(50 * time.Millisecond) // uptime has no event to wait for
		}
	}
}
