package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const (
	// EnvServer is the environment variable that, when set, names the
	// redis-server binary instead of looking it up in PATH.
	EnvServer = "REDIS_SERVER"

	// EnvRequire is the environment variable that, when set to "1", turns a
	// missing redis-server from a skipped test into a failed one. CI sets it so
	// that integration tests cannot silently stop running.
	EnvRequire = "REDLOCK_REQUIRE_REDIS"

	installHint = "install it with `apt-get install -y redis-server` (Debian/Ubuntu) " +
		"or `brew install redis`, or set " + EnvServer + "=/path"
)

// Require returns the absolute path of the redis-server binary: the one named
// by $REDIS_SERVER if that is set, otherwise the one found in PATH.
//
// If there is no such executable, Require skips the test with a message that
// says how to install redis-server, unless $REDLOCK_REQUIRE_REDIS is "1", in
// which case it fails the test with t.Fatalf. Either way it does not return.
// [Start] calls Require itself.
func Require(t testing.TB) string {
	t.Helper()
	path, err := lookupServer()
	if err == nil {
		return path
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("redistest: %v (failing because %s=1)", err, EnvRequire)
	}
	t.Skipf("redistest: %v", err)
	return ""
}

// lookupServer resolves the redis-server binary as described on Require.
func lookupServer() (string, error) {
	if name := os.Getenv(EnvServer); name != "" {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s=%s is not an executable redis-server (%v); %s",
				EnvServer, name, err, installHint)
		}
		// Servers run with their own working directory, so a relative path
		// would resolve differently there.
		return filepath.Abs(path)
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH; %s", installHint)
	}
	return filepath.Abs(path)
}
