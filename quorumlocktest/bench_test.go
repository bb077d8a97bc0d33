package quorumlocktest_test

import (
	"context"
	"testing"

	"github.com/quorumlock/quorumlock/quorumlocktest"
)

// BenchmarkStartLockUnlockTeardown measures what one unit test pays for the
// kit: start 5 nodes, build a node set, lock, unlock, and tear it all down.
// The figure is in the package doc.
func BenchmarkStartLockUnlockTeardown(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		err := inTest(func(t testing.TB) {
			m := quorumlocktest.Start(t, 5).Redlock().NewMutex("bench")
			if err := m.LockContext(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.UnlockContext(ctx); err != nil {
				t.Fatal(err)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
