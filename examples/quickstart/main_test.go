package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuickstart runs the program as `go run ./examples/quickstart` does and
// fails if any claim it prints does not hold.
func TestQuickstart(t *testing.T) {
	if err := run(t.Context()); err != nil {
		t.Fatal(err)
	}
}
