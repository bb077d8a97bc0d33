package redistest

import (
	"os"
	"strings"
	"testing"
)

// FIPSOnly reports whether the process runs in FIPS 140-only mode
// (GODEBUG=fips140=only), where crypto/sha1 refuses to run.
func FIPSOnly() bool { return strings.Contains(os.Getenv("GODEBUG"), "fips140=only") }

// SkipMiniredisInFIPSOnly skips t in FIPS 140-only mode: miniredis computes
// the SHA-1 digest of every script it is sent, which that mode refuses. The
// library itself computes none; the same tests on redis-server still run.
func SkipMiniredisInFIPSOnly(t testing.TB) {
	t.Helper()
	if FIPSOnly() {
		t.Skip("miniredis computes SHA-1, which GODEBUG=fips140=only refuses; left out of the FIPS run (.ci/run)")
	}
}
