package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The tests run CMD as this test binary with helperEnv set: a program
// that reports on its stdout what it sees, so the tests need no sleep to
// know where it is.
const helperEnv = "QUORUMLOCK_TEST_HELPER"

// helperCmd returns the argv of the helper in mode, for after "--".
func helperCmd(mode string, args ...string) []string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{self, mode}, args...)
}

// helper runs the helper program and returns its exit status. Modes:
//
//	hold [-exit N] [-term exit|ignore] [-child] [-pid]: print "holding NAME
//	    TOKEN" (and "child PID" for a grandchild in its group, "pid PID" for
//	    itself), then wait for a
//	    line or the end of stdin and exit N; on SIGTERM, SIGINT, SIGQUIT or SIGHUP print
//	    "signal NAME" and exit N or go on.
//	excl DIR WORK: take DIR/marker exclusively ("overlap" and exit 99 if
//	    another holds it), work for WORK, log "start end" (ns) to DIR/log.
//	env N: print "name NAME" and "token TOKEN", exit N.
//	sleep: sleep a minute.
func helper(args []string) int {
	if len(args) == 0 {
		return 2
	}
	switch mode, args := args[0], args[1:]; mode {
	case "hold":
		fs := flag.NewFlagSet("hold", flag.ContinueOnError)
		code := fs.Int("exit", 0, "")
		term := fs.String("term", "exit", "")
		child := fs.Bool("child", false, "")
		pid := fs.Bool("pid", false, "")
		if fs.Parse(args) != nil {
			return 2
		}
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP)
		fmt.Println("holding", os.Getenv("QUORUMLOCK_NAME"), os.Getenv("QUORUMLOCK_FENCING_TOKEN"))
		if *pid {
			fmt.Println("pid", os.Getpid())
		}
		if *child {
			c := exec.Command(helperCmd("sleep")[0], "sleep")
			if c.Start() != nil {
				return 2
			}
			fmt.Println("child", c.Process.Pid)
		}
		line := make(chan struct{})
		go func() {
			bufio.NewReader(os.Stdin).ReadString('\n')
			close(line)
		}()
		for {
			select {
			case sig := <-sigs:
				fmt.Println("signal", sig)
				if *term == "exit" {
					return *code
				}
			case <-line:
				fmt.Println("done")
				return *code
			}
		}
	case "excl":
		work, err := time.ParseDuration(args[1])
		if err != nil {
			return 2
		}
		marker := filepath.Join(args[0], "marker")
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Println("overlap:", err)
			return 99
		}
		f.Close()
		start := time.Now()
		time.Sleep(work) // the work done under the lock
		end := time.Now()
		if errors.Join(os.Remove(marker), appendLine(filepath.Join(args[0], "log"), fmt.Sprint(start.UnixNano(), end.UnixNano()))) != nil {
			return 2
		}
		return 0
	case "env":
		fmt.Println("name", os.Getenv("QUORUMLOCK_NAME"))
		fmt.Println("token", os.Getenv("QUORUMLOCK_FENCING_TOKEN"))
		code, _ := strconv.Atoi(args[0])
		return code
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}
