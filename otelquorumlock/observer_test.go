package otelquorumlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/otelquorumlock"
	"github.com/quorumlock/quorumlock/redlock"
)

// The tests record with the OpenTelemetry SDK itself (a ManualReader for the
// metrics, a SpanRecorder for the spans) what locks on real redis-server
// processes do.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for something the code under test signals.
const wait = 10 * time.Second

// telemetry is an SDK meter and tracer provider, recording in memory.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	meters *sdkmetric.MeterProvider
	traces *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tm.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.traces = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	t.Cleanup(func() {
		assert.NoError(t, tm.meters.Shutdown(context.Background()))
		assert.NoError(t, tm.traces.Shutdown(context.Background()))
	})
	return tm
}

// observer returns an Observer recording into tm.
func (tm *telemetry) observer(opts ...otelquorumlock.Option) *redlock.Observer {
	return otelquorumlock.NewObserver(append([]otelquorumlock.Option{
		otelquorumlock.WithMeterProvider(tm.meters), otelquorumlock.WithTracerProvider(tm.traces),
	}, opts...)...)
}

// metric collects and returns the metric called name (its zero value if
// nothing was recorded).
func (tm *telemetry) metric(t *testing.T, name string) metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	return metricdata.Metrics{Name: name}
}

// has reports whether set holds every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// count returns the number of values recorded in the histogram m with the
// attributes want, and their sum.
func count(m metricdata.Metrics, want ...attribute.KeyValue) (n uint64, sum float64) {
	switch h := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			if has(p.Attributes, want) {
				n, sum = n+p.Count, sum+p.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			if has(p.Attributes, want) {
				n, sum = n+p.Count, sum+float64(p.Sum)
			}
		}
	}
	return n, sum
}

// total returns the value of the counter or up-down counter m over the data
// points with the attributes want.
func total(m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	var v int64
	if s, ok := m.Data.(metricdata.Sum[int64]); ok {
		for _, p := range s.DataPoints {
			if has(p.Attributes, want) {
				v += p.Value
			}
		}
	}
	return v
}

// lockSet returns a node set over servers with the given observer, its
// clients with the settings we recommend (a stopped node fails at once).
func lockSet(t *testing.T, servers []*redistest.Server, o *redlock.Observer, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	}
	opts = append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithObserver(o)}, opts...)
	rs, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

var (
	mutexAttr       = attribute.String("quorumlock.primitive", "mutex")
	obtained        = attribute.String("quorumlock.outcome", "obtained")
	busy            = attribute.String("quorumlock.outcome", "busy")
	unavailable     = attribute.String("quorumlock.outcome", "unavailable")
	connectionError = attribute.String("error.type", "connection")
)

// Contention: the refused TryLock is an acquisition busy, the holder's one
// obtained; the release records the hold and the validity left; each call
// is a span under the caller's, with its outcome and attempts. The lock's
// name appears nowhere.
func TestContentionShowsAsBusy(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	rs := lockSet(t, servers, tm.observer())
	ctx, parent := tm.traces.Tracer("test").Start(t.Context(), "request")
	holder := rs.NewMutex("orders:42", mutex.WithTTL(10*time.Second))
	require.NoError(t, holder.LockContext(ctx))
	require.ErrorIs(t, rs.NewMutex("orders:42").TryLockContext(ctx), mutex.ErrNotObtained)
	require.NoError(t, holder.UnlockContext(ctx))
	parent.End()

	duration := tm.metric(t, "quorumlock.acquire.duration")
	assert.Equal(t, "s", duration.Unit)
	n, _ := count(duration, busy, mutexAttr)
	assert.Equal(t, uint64(1), n, "the refused TryLock")
	n, _ = count(duration, obtained, mutexAttr)
	assert.Equal(t, uint64(1), n, "the holder's Lock")
	n, sum := count(tm.metric(t, "quorumlock.acquire.attempts"), busy)
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, 1.0, sum, "one attempt")
	n, _ = count(tm.metric(t, "quorumlock.hold.duration"), mutexAttr)
	assert.Equal(t, uint64(1), n)
	n, sum = count(tm.metric(t, "quorumlock.release.validity_left"), mutexAttr)
	assert.Equal(t, uint64(1), n)
	assert.Greater(t, sum, 9.0, "released well within a 10s validity")

	var names []string
	for _, s := range tm.spans.Ended() {
		if s.Name() == "request" {
			continue
		}
		names = append(names, s.Name())
		assert.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of the caller's span", s.Name())
		attrs := attribute.NewSet(s.Attributes()...)
		assert.True(t, has(attrs, []attribute.KeyValue{mutexAttr}), "%s: %v", s.Name(), s.Attributes())
		if s.Name() == "quorumlock.trylock" {
			assert.True(t, has(attrs, []attribute.KeyValue{busy, attribute.Int("quorumlock.attempts", 1)}), "%v", s.Attributes())
			assert.Equal(t, codes.Unset, s.Status().Code, "busy is an answer, not a failure")
		}
	}
	assert.Equal(t, []string{"quorumlock.lock", "quorumlock.trylock", "quorumlock.unlock"}, names)
	assertNoName(t, tm, "orders:42")
}

// assertNoName fails if name is the value of any attribute of tm's metrics
// or spans, or in a span's status.
func assertNoName(t *testing.T, tm *telemetry, name string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	var sets []attribute.Set
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			}
		}
	}
	for _, s := range tm.spans.Ended() {
		sets = append(sets, attribute.NewSet(s.Attributes()...))
		assert.NotContains(t, s.Status().Description, name)
	}
	for _, set := range sets {
		for _, kv := range set.ToSlice() {
			assert.NotContains(t, kv.Value.String(), name, "attribute %s", kv.Key)
		}
	}
}

// A killed node: its refusals count in node.errors under its address and
// port; with a majority down, acquisitions are unavailable, and the span
// is an error naming the failed nodes.
func TestKilledNodesShowAsNodeErrorsAndUnavailable(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	o := tm.observer()
	var failed <-chan redlock.NodeFailure
	o.NodeError, failed = signalled(o.NodeError)
	rs := lockSet(t, servers, o)
	servers[2].Kill()
	m := rs.NewMutex("orders:43")
	require.NoError(t, m.LockContext(t.Context()), "two of three are a majority")
	require.NoError(t, m.UnlockContext(t.Context()))
	receive(t, failed, "node error") // each may come after the call that was decided without it
	receive(t, failed, "node error")
	errs := tm.metric(t, "quorumlock.node.errors")
	dead := []attribute.KeyValue{attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", servers[2].Port())}
	assert.GreaterOrEqual(t, total(errs, append(dead, connectionError)...), int64(2), "the acquire's and the release's")
	assert.Equal(t, total(errs), total(errs, dead...), "no other node failed")

	servers[1].Kill()
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrNodesUnavailable)
	n, _ := count(tm.metric(t, "quorumlock.acquire.duration"), unavailable, mutexAttr)
	assert.Equal(t, uint64(1), n)
	spans := tm.spans.Ended()
	last := spans[len(spans)-1]
	assert.Equal(t, "quorumlock.trylock", last.Name())
	assert.Equal(t, codes.Error, last.Status().Code)
	attrs := attribute.NewSet(last.Attributes()...)
	assert.True(t, has(attrs, []attribute.KeyValue{unavailable}))
	failedNodes, _ := attrs.Value("quorumlock.failed_nodes")
	assert.ElementsMatch(t, []string{servers[1].Addr(), servers[2].Addr()}, failedNodes.AsStringSlice())
	assertNoName(t, tm, "orders:43")
}

// A lease whose keys are gone is lost at its next renewal: lease.lost counts
// it with cause not_held.
func TestLostLeaseIsCountedWithItsCause(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	rs := lockSet(t, servers, tm.observer())
	m := rs.NewMutex("job:nightly", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	for _, s := range servers {
		s.Do(t, "DEL", "job:nightly")
	}
	select {
	case <-m.Lost():
	case <-time.After(wait):
		t.Fatal("the renewal did not find the lease lost")
	}
	lost := tm.metric(t, "quorumlock.lease.lost")
	assert.Equal(t, int64(1), total(lost, attribute.String("quorumlock.cause", "not_held"), mutexAttr))
	assert.Equal(t, int64(1), total(lost))
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)

	held := rs.NewMutex("job:hourly")
	require.NoError(t, held.LockContext(t.Context()))
	require.NoError(t, rs.Close())
	assert.Equal(t, int64(1), total(tm.metric(t, "quorumlock.lease.lost"), attribute.String("quorumlock.cause", "closed")))
	assertNoName(t, tm, "job:")
}
