package redlock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func urlsOf(servers []*redistest.Server, userinfo string) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + userinfo + s.Addr() + "/0"
	}
	return urls
}

// lockCycle exercises what a lock needs from a node: acquire, extend, a
// waiter woken by the release (pub/sub), fencing, the quarantine's INFO.
// The locks have opts too.
func lockCycle(t *testing.T, rs *redlock.Redlock, opts ...mutex.Option) {
	t.Helper()
	m := rs.NewMutex("urls:job", append([]mutex.Option{mutex.WithFencing()}, opts...)...)
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.ExtendContext(t.Context()))
	assert.Positive(t, m.FencingToken())
	waiter := rs.NewMutex("urls:job", append([]mutex.Option{mutex.WithRetryDelay(time.Hour, time.Hour)}, opts...)...)
	done := make(chan error, 1)
	go func() { done <- waiter.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return rs.Waiting("urls:job") == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, m.UnlockContext(t.Context()))
	select {
	case err := <-done:
		require.NoError(t, err, "woken by the release notification")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	require.NoError(t, waiter.UnlockContext(t.Context()))
}

func TestNewFromURLs(t *testing.T) {
	servers := redistest.Start(t, 3)
	urls := urlsOf(servers, "")
	rs, err := redlock.NewFromURLs(t.Context(), urls)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	assert.Equal(t, urls, rs.Nodes())
	lockCycle(t, rs)
}

func TestNewFromURLsNeverPrintsAPassword(t *testing.T) {
	const secret = "s3cret-pa55"
	servers := redistest.Start(t, 3, redistest.WithPassword(secret))
	dead := freePort(t)

	t.Run("a minority down: usable, and lock errors name it", func(t *testing.T) {
		urls := urlsOf(servers[:2], ":"+secret+"@")
		urls = append(urls, "redis://:"+secret+"@127.0.0.1:"+dead+"/0")
		rs, err := redlock.NewFromURLs(t.Context(), urls)
		require.NoError(t, err, "two of three answered")
		t.Cleanup(func() { _ = rs.Close() })
		for _, n := range rs.Nodes() {
			assert.NotContains(t, n, secret)
		}
		m := rs.NewMutex("urls:minority")
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	})
	t.Run("a majority down: usable, and lock errors name the nodes", func(t *testing.T) {
		urls := append(urlsOf(servers[:1], ":"+secret+"@"), "redis://:"+secret+"@127.0.0.1:"+dead+"/0")
		urls = append(urls, "redis://:"+secret+"@127.0.0.1:"+freePort(t)+"/0")
		rs, err := redlock.NewFromURLs(t.Context(), urls)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rs.Close() })
		err = rs.NewMutex("urls:majority").TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.NotContains(t, err.Error(), secret)
		var ne *mutex.NodeError
		require.ErrorAs(t, err, &ne)
		assert.Contains(t, ne.Node, "127.0.0.1:")
		assert.Contains(t, ne.Node, "xxxxx")
	})
	t.Run("wrong password everywhere: usable set, locks fail", func(t *testing.T) {
		rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ":wrong-"+secret+"@"))
		require.NoError(t, err, "not malformed: the nodes' answers are the lock calls' to report")
		t.Cleanup(func() { _ = rs.Close() })
		err = rs.NewMutex("urls:wrong-password").TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.NotContains(t, err.Error(), secret)
		var merr *multierror.Error
		require.ErrorAs(t, err, &merr)
		assert.GreaterOrEqual(t, len(merr.Errors), 2, "decided once two failed")
	})
	t.Run("invalid URL", func(t *testing.T) {
		for _, bad := range []string{
			"redis://user:" + secret + "@127.0.0.1:notaport/0",
			"http://user:" + secret + "@127.0.0.1:6379",
			"redis://user:" + secret + "@127.0.0.1:6379/notadb",
			// Unescaped characters that make url.Parse fail somewhere
			// inside the password, so that its error quotes a piece of it.
			"redis://:s3c/ret-pa55@127.0.0.1:6379",
			"redis://:s3c#ret-pa55@127.0.0.1:6379",
			"redis://:s3c?ret-pa55@127.0.0.1:6379",
			"redis://:s3c@ret-pa55@127.0.0.1:6379/x",
			"redis://us/er:s3c:ret-pa55@127.0.0.1:6379",
			// A password given as a query option, which go-redis refuses:
			// its error quotes the URL.
			"redis://127.0.0.1:6379?password=" + secret + "&dial_timeout=abc",
			"redis://127.0.0.1:6379/0?foo=bar&password=" + secret,
			"redis://127.0.0.1:6379?PASS=" + secret,
		} {
			rs, err := redlock.NewFromURLs(t.Context(), []string{bad})
			require.Nil(t, rs)
			require.ErrorIs(t, err, mutex.ErrInvalid, bad)
			t.Log(err)
			for _, piece := range []string{secret, "s3c", "ret-pa55"} {
				assert.NotContains(t, err.Error(), piece, bad)
			}
		}
	})
	t.Run("no URLs", func(t *testing.T) {
		_, err := redlock.NewFromURLs(t.Context(), nil)
		require.ErrorIs(t, err, mutex.ErrInvalid)
	})
	t.Run("no TCP port", func(t *testing.T) { // go-redis's parser takes these; every dial would fail
		for _, bad := range []string{"redis://127.0.0.1:99999", "redis://127.0.0.1:0", "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:65536"} {
			rs, err := redlock.NewFromURLs(t.Context(), []string{bad})
			require.Nil(t, rs)
			require.ErrorIs(t, err, mutex.ErrInvalid, bad)
			require.ErrorContains(t, err, "a TCP port is 1 to 65535", bad)
		}
	})
	t.Run("no host or a wrong database", func(t *testing.T) { // go-redis's parser takes these: localhost:6379, db 0
		bad := map[string]string{
			"redis://":                         "no host",
			"redis://:6379":                    "no host",
			"rediss://":                        "no host",
			"redis://user:pw@/0":               "no host",
			"redis+cluster://":                 "no host",
			"redis+cluster://:7000":            "no host",
			"redis://127.0.0.1:6379/-1":        "must not be negative",
			"redis+cluster://127.0.0.1:7000/1": "a Cluster has only database 0",
		}
		for raw, want := range bad {
			rs, err := redlock.NewFromURLs(t.Context(), []string{raw})
			require.Nil(t, rs, raw)
			require.ErrorIs(t, err, mutex.ErrInvalid, raw)
			require.ErrorContains(t, err, want, raw)
			assert.NotContains(t, err.Error(), "pw@", raw)
		}
	})
	t.Run("negative dial timeout", func(t *testing.T) { // go-redis's parser takes it; every dial would fail
		for _, bad := range []string{"redis://127.0.0.1:6379?dial_timeout=-5s", "redis+cluster://127.0.0.1:7000?dial_timeout=-1s"} {
			rs, err := redlock.NewFromURLs(t.Context(), []string{bad})
			require.Nil(t, rs)
			require.ErrorIs(t, err, mutex.ErrInvalid, bad)
			require.ErrorContains(t, err, "dial_timeout", bad)
		}
	})
}

// A node that accepts connections and never answers does not hold
// NewFromURLs up: the ping is bounded.
func TestNewFromURLsBoundsThePing(t *testing.T) {
	servers := redistest.Start(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	urls := append(urlsOf(servers, ""), "redis://"+ln.Addr().String())
	start := time.Now()
	rs, err := redlock.NewFromURLs(t.Context(), urls)
	require.Less(t, time.Since(start), 4*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
}

// The minimal ACL user documented in docs/operations.md can do everything the
// library does, and only that: with every key (~*), and with the key prefix
// operations.md recommends (~locks:* and redlock.WithKeyPrefix("locks:")).
func TestNewFromURLsWithMinimalACLUser(t *testing.T) {
	for name, tc := range map[string]struct {
		rules  string
		prefix string
	}{
		"all keys":   {MinimalACL, ""},
		"key prefix": {strings.Replace(MinimalACL, "~*", "~locks:*", 1), "locks:"},
	} {
		t.Run(name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			for _, s := range servers {
				args := []any{"ACL", "SETUSER", "locker"}
				for _, rule := range strings.Fields(tc.rules) {
					args = append(args, rule)
				}
				require.Equal(t, "OK", s.Do(t, args...))
			}
			rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, "locker:locker-pw@"),
				redlock.WithKeyPrefix(tc.prefix),
				redlock.WithRestartQuarantine(time.Second)) // needs INFO, which the user may run
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, rs.Close()) })
			// The servers are new: the first lock waits out their quarantine.
			lockCycle(t, rs, mutex.WithTTL(time.Second))
			everyPrimitive(t, rs, mutex.WithTTL(time.Second))
			report, err := rs.Check(t.Context())
			require.NoError(t, err)
			for _, f := range report.Findings {
				assert.False(t, f.Setting == "acl" && f.Severity != redlock.Note, "%v", f) // the user may not run ACL DRYRUN: a note
			}

			// It may not touch other data.
			c := servers[0].Client(t)
			require.NoError(t, c.Do(t.Context(), "AUTH", "locker", "locker-pw").Err())
			err = c.Do(t.Context(), "FLUSHALL").Err()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "NOPERM")
			if tc.prefix != "" {
				err = c.Set(t.Context(), "orders:42", "x", 0).Err()
				require.Error(t, err, "a key outside the prefix")
				assert.Contains(t, err.Error(), "NOPERM")
			}
		})
	}
}

// A user that may not PUBLISH (notifications left on by mistake) still
// releases: the release script deletes the key before it publishes, and a
// script is not rolled back, so a refused PUBLISH must not be reported as a
// failed release while the lock is in fact free.
func TestReleaseWithoutPublishPermission(t *testing.T) {
	servers := redistest.Start(t, 3)
	rules := strings.NewReplacer("+publish", "", "+subscribe", "", "+unsubscribe", "").Replace(MinimalACL)
	for _, s := range servers {
		args := []any{"ACL", "SETUSER", "locker"}
		for _, rule := range strings.Fields(rules) {
			args = append(args, rule)
		}
		require.Equal(t, "OK", s.Do(t, args...))
	}
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, "locker:locker-pw@"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	m := rs.NewMutex("urls:no-publish")
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()), "the keys are deleted: the release succeeded")
	// Unlock returns once a majority confirmed; the third release may still
	// be on its way.
	left := 0
	for _, s := range servers {
		left += int(s.Do(t, "EXISTS", "urls:no-publish").(int64))
	}
	assert.LessOrEqual(t, left, 1, "deleted on a majority")
	require.NoError(t, rs.NewMutex("urls:no-publish").TryLockContext(t.Context()))
}

// Two names for one server are caught by its run_id: otherwise it would cast
// two of the three votes, and one server would decide every majority.
func TestNewFromURLsRefusesOneServerUnderTwoNames(t *testing.T) {
	servers := redistest.Start(t, 2)
	for _, alias := range []string{"localhost", "[::ffff:127.0.0.1]"} {
		urls := []string{
			"redis://" + servers[0].Addr(),
			fmt.Sprintf("redis://%s:%d", alias, servers[0].Port()),
			"redis://" + servers[1].Addr(),
		}
		rs, err := redlock.NewFromURLs(t.Context(), urls)
		require.Nil(t, rs, alias)
		require.ErrorIs(t, err, mutex.ErrInvalid, alias)
		assert.ErrorContains(t, err, "are the same redis-server", alias)
	}
}

// MinimalACL is the rule set of docs/operations.md for a lock user whose
// locks have no key prefix (~* would be ~<prefix>* otherwise, plus
// ~<prefix>quorumlock:*).
const MinimalACL = `on >locker-pw resetkeys ~* resetchannels &quorumlock:released:* -@all
	+eval +evalsha +script|load +get +set +pexpire +pttl +del +exists +incr +time +type +scan
	+zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcard +zscore
	+hget +hset +hdel +hexists +hgetall +hmget +hlen
	+publish +subscribe +unsubscribe +ping +info`

func TestNewFromURLsOverTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, certFile, keyFile, caFile := makeCerts(t, dir)
	var servers []*redistest.Server
	var urls []string
	for range 3 {
		port := freePort(t)
		servers = append(servers, redistest.StartOne(t, redistest.WithArgs(
			"--tls-port", port, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")))
		urls = append(urls, "rediss://127.0.0.1:"+port)
	}
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))

	rs, err := redlock.NewFromURLs(t.Context(), urls, redlock.WithTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	lockCycle(t, rs)

	// Without the CA the certificate is refused, on every node: the lock
	// calls say so.
	refused, err := redlock.NewFromURLs(t.Context(), urls)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, refused.Close()) })
	err = refused.NewMutex("urls:tls").TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.Contains(t, err.Error(), "certificate")
	_ = servers
}

// makeCerts writes a throwaway CA and a server certificate for 127.0.0.1.
func makeCerts(t *testing.T, dir string) (caPEM []byte, certFile, keyFile, caFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "quorumlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	return caPEM,
		write("server.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})),
		write("server.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
		write("ca.crt", caPEM)
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return strconv.Itoa(port)
}

// Closing a Redlock while LockContext calls wait on it leaves no goroutine
// behind: the pub/sub sessions end with their clients, health checks
// included.
func TestCloseWhileWaitingLeavesNoGoroutine(t *testing.T) {
	servers := redistest.Start(t, 3)
	baseline := goleak.IgnoreCurrent()
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	holder := rs.NewMutex("urls:close", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_ = rs.NewMutex("urls:close", mutex.WithRetryDelay(time.Hour, time.Hour)).LockContext(ctx)
		})
	}
	require.Eventually(t, func() bool { return rs.Waiting("urls:close") == 3 }, 10*time.Second, time.Millisecond)
	for _, s := range servers {
		require.Eventually(t, func() bool {
			return strings.Contains(s.Do(t, "CLIENT", "LIST").(string), " sub=1 ")
		}, 10*time.Second, time.Millisecond, "subscribed on %s", s.Addr())
	}
	require.NoError(t, rs.Close())
	cancel()
	wg.Wait()
	goleak.VerifyNone(t, baseline)
}

// everyPrimitive runs each primitive and operator's call once on rs, as a
// user whose ACL lets it run only what the library needs would.
func everyPrimitive(t *testing.T, rs *redlock.Redlock, opts ...mutex.Option) {
	t.Helper()
	ctx := t.Context()
	rw := rs.NewRWMutex("urls:rw", opts...)
	require.NoError(t, rw.RLockContext(ctx))
	require.NoError(t, rw.RUnlockContext(ctx))
	require.NoError(t, rw.LockContext(ctx))
	require.NoError(t, rw.UnlockContext(ctx))
	multi := rs.NewMultiMutex([]string{"{urls}:a", "{urls}:b"}, opts...) // one hash tag: also on Cluster nodes
	require.NoError(t, multi.LockContext(ctx))
	require.NoError(t, multi.UnlockContext(ctx))
	sem := rs.NewSemaphore("urls:sem", 2, opts...)
	permit, err := sem.AcquireContext(ctx)
	require.NoError(t, err)
	require.NoError(t, permit.ReleaseContext(ctx))
	e := rs.NewElection("urls:lead", opts...)
	require.NoError(t, e.Campaign(ctx, "me"))
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "me", l.Value)
	in, err := rs.Inspect(ctx, "urls:lead")
	require.NoError(t, err)
	require.NotEmpty(t, in.Locks)
	assert.NotEmpty(t, in.Locks[0].Holder)
	require.NoError(t, e.Resign(ctx))
	m := rs.NewMutex("urls:forced", opts...)
	require.NoError(t, m.LockContext(ctx))
	_, err = rs.ForceUnlock(ctx, "urls:forced")
	require.NoError(t, err)
}
