package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// replica is one instance of the service, with its own connections to the
// lock nodes, as a separate process would have. All replicas share the
// semaphore by its name: its permits live on the nodes, not in any replica.
type replica struct {
	id      int
	rs      *redlock.Redlock
	permits *mutex.Semaphore
}

func newReplica(id int, rs *redlock.Redlock) *replica {
	return &replica{id: id, rs: rs, permits: rs.NewSemaphore(semaphoreName, limit,
		mutex.WithTTL(ttl),
		// The permit is renewed in the background for as long as the export
		// runs, however long that is; Lost() closes if renewals fail.
		mutex.WithAutoExtend())}
}

// work is one export. Its ctx is cancelled, with the loss as its cause, if
// the permit is lost while it runs: it must stop then, since the database
// may already be serving limit other exports.
type work func(ctx context.Context) error

// exportResult is what one export request became.
type exportResult struct {
	Replica, Export int
	Waited          time.Duration // from the request to the permit
	Acquired        time.Time     // when the permit was obtained
	Until           time.Time     // the end of its validity when the export ended
	Ran             time.Duration // how long the export ran, under its permit
	// Err is nil when the export ran and ended well; otherwise the
	// acquisition's error (matching mutex.ErrNotObtained), or the export's,
	// joined with the loss (matching mutex.ErrLost) if the permit was lost.
	Err error
}

// runExport waits for a permit (AcquireContext, until ctx ends), runs w
// under it and releases it, even if ctx has ended by then.
func (r *replica) runExport(ctx context.Context, export int, w work) exportResult {
	res := exportResult{Replica: r.id, Export: export}
	asked := time.Now()
	p, err := r.permits.AcquireContext(ctx)
	res.Acquired = time.Now()
	res.Waited = res.Acquired.Sub(asked)
	if err != nil {
		res.Err = err
		return res
	}
	// The export's ctx ends when the permit is lost.
	jobCtx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-p.Lost():
			cancel(p.LostCause())
		case <-jobCtx.Done():
		}
	}()
	began := time.Now()
	res.Err = w(jobCtx)
	res.Ran = time.Since(began)
	res.Until = p.Until()
	lost := context.Cause(jobCtx)
	cancel(nil)
	<-watched
	// Released with a ctx of its own: a request whose ctx ended must still
	// give its permit back, or it stays taken until its TTL.
	release, stop := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer stop()
	wasLost := errors.Is(lost, mutex.ErrLost)
	if wasLost {
		res.Err = errors.Join(res.Err, lost)
	}
	// ErrNotHeld after a loss says it again; without one, it is news: the
	// permit expired under the export, which may have overlapped limit others.
	if err := p.ReleaseContext(release); err != nil && !(wasLost && errors.Is(err, mutex.ErrNotHeld)) {
		res.Err = errors.Join(res.Err, fmt.Errorf("release: %w", err))
	}
	return res
}

// releaseTimeout bounds a release.
const releaseTimeout = 5 * time.Second

// database stands for what the semaphore protects: a server that must not
// serve more than limit exports at once. It counts the exports it serves and
// remembers the most it served at the same time. Safe for concurrent use.
type database struct {
	mu      sync.Mutex
	serving int
	peak    int
	served  int
}

// serve runs export on the database, counting it while it runs.
func (db *database) serve(ctx context.Context, export work) error {
	db.mu.Lock()
	db.serving++
	db.served++
	db.peak = max(db.peak, db.serving)
	db.mu.Unlock()
	defer func() {
		db.mu.Lock()
		db.serving--
		db.mu.Unlock()
	}()
	return export(ctx)
}

// exportFor is an export that reads for d, or stops early when ctx ends.
func exportFor(d time.Duration) work {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("export abandoned: %w", context.Cause(ctx))
		}
	}
}

// stats returns the most exports served at once and how many were served.
func (db *database) stats() (peak, served int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.peak, db.served
}
