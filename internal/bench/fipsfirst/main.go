// Command fipsfirst is the FIPS 140-only child of the bench's scenario 12:
//
//	GODEBUG=fips140=only fipsfirst ADDR,ADDR,... N
//
// makes N first locks of a new quorumlock instance (firstlock.Quorumlock)
// on the nodes at the addresses and prints their durations, in
// nanoseconds, as a JSON array.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/bench/firstlock"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fipsfirst:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: fipsfirst ADDR,ADDR,... N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		return fmt.Errorf("bad count %q", args[1])
	}
	addrs := strings.Split(args[0], ",")
	ns := make([]int64, 0, n)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := firstlock.Quorumlock(ctx, addrs, fmt.Sprintf("bench:first:fips:%d", i))
		cancel()
		if err != nil {
			return err
		}
		ns = append(ns, int64(d))
	}
	return json.NewEncoder(os.Stdout).Encode(ns)
}
