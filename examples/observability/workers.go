package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
)

// The workload: workers that take turns at one lock, a poller that tries
// it without waiting, and a job whose work outlasts its lock's TTL.
const (
	workers  = 4
	holdTime = 5 * time.Millisecond  // each worker's turn under the lock
	pollTime = 20 * time.Millisecond // between the poller's tries
	jobTTL   = 200 * time.Millisecond
	jobTime  = 300 * time.Millisecond // longer than jobTTL: it overruns
)

// contend runs the workload for d (until ctx ends if d is 0), calling fault
// half way if d is not 0 and fault is not nil. It reports the overrunning
// job on out, and returns an error only if a lock call fails for another
// reason than the end of the run.
func (s *service) contend(ctx context.Context, out io.Writer, d time.Duration, fault func()) error {
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		if fault != nil {
			halfway := time.AfterFunc(d/2, fault)
			defer halfway.Stop()
		}
	}
	errs := make(chan error, workers+2)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { errs <- s.work(ctx) })
	}
	wg.Go(func() { errs <- s.poll(ctx) })
	wg.Go(func() { errs <- s.overrun(ctx, out) })
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// ended reports whether err is the run's ctx ending.
func ended(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// work takes the lock "report" in turn with the other workers, waiting
// (LockContext) when it is held.
func (s *service) work(ctx context.Context) error {
	m := s.rs.NewMutex("report")
	for {
		if err := m.LockContext(ctx); err != nil {
			if ended(ctx, err) {
				return nil
			}
			return err
		}
		timer := time.NewTimer(holdTime) // the work under the lock
		<-timer.C
		if err := m.UnlockContext(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
}

// poll tries the lock "report" without waiting, as a request that answers
// "busy" would: most tries find it held.
func (s *service) poll(ctx context.Context) error {
	m := s.rs.NewMutex("report")
	ticker := time.NewTicker(pollTime)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		switch err := m.TryLockContext(ctx); {
		case err == nil:
			if err := m.UnlockContext(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		case ended(ctx, err):
			return nil
		case !errors.Is(err, mutex.ErrNotObtained):
			return err
		}
	}
}

// overrun runs, once, a job whose work takes longer than its lock's TTL and
// that neither extends the lock nor watches Lost: its Unlock finds the lock
// gone (ErrNotHeld), which shows as a lost lease and a negative validity
// left. Renewals (mutex.WithAutoExtend, or redlock.Do) prevent exactly this.
func (s *service) overrun(ctx context.Context, out io.Writer) error {
	m := s.rs.NewMutex("export", mutex.WithTTL(jobTTL))
	if err := m.LockContext(ctx); err != nil {
		if ended(ctx, err) {
			return nil
		}
		return err
	}
	timer := time.NewTimer(jobTime) // the job
	<-timer.C
	err := m.UnlockContext(context.WithoutCancel(ctx))
	if !errors.Is(err, mutex.ErrNotHeld) {
		return fmt.Errorf("the job that overran its %v TTL: unlock returned %v, not ErrNotHeld", jobTTL, err)
	}
	fmt.Fprintf(out, "a job ran %v under a %v lock, and its unlock said: %v\n", jobTime, jobTTL, err)
	return nil
}
