package otelquorumlock

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/redlock"
)

// scope names the meter and the tracer.
const scope = "github.com/quorumlock/quorumlock/otelquorumlock"

// The attributes of the package's own.
const (
	primitiveKey   = attribute.Key("quorumlock.primitive")
	outcomeKey     = attribute.Key("quorumlock.outcome")
	causeKey       = attribute.Key("quorumlock.cause")
	attemptsKey    = attribute.Key("quorumlock.attempts")
	failedNodesKey = attribute.Key("quorumlock.failed_nodes")
	nameKey        = attribute.Key("quorumlock.name")
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	names   bool
}

// WithMeterProvider records the metrics with mp. Default (or nil): the
// global provider, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider records the spans with tp. Default (or nil): the
// global provider, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracers = tp }
}

// WithLockNameAttribute adds the lock's name, as quorumlock.name, to the
// metrics and spans of calls, waits and lost leases, and lets span statuses
// carry the call's error message, which names the lock. Default off. Use it
// only with a small, fixed set of names (a few jobs, not one per order):
// every name is a time series of every metric.
func WithLockNameAttribute() Option { return func(c *config) { c.names = true } }

// NewObserver returns an Observer that records what a node set's locks do
// with OpenTelemetry (the instruments and spans are listed in the package
// documentation). Give it to redlock.New with redlock.WithObserver; it may
// serve several sets. Instruments it cannot create are reported to
// otel.Handle, and their records dropped.
func NewObserver(opts ...Option) *redlock.Observer {
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.meters == nil {
		cfg.meters = otel.GetMeterProvider()
	}
	if cfg.tracers == nil {
		cfg.tracers = otel.GetTracerProvider()
	}
	o := &observer{names: cfg.names, tracer: cfg.tracers.Tracer(scope)}
	o.create(cfg.meters.Meter(scope))
	return &redlock.Observer{
		Start: o.start, Done: o.done, Released: o.released, LeaseLost: o.leaseLost, NodeError: o.nodeError,
		QuarantineEnter: o.quarantineEnter, QuarantineLeave: o.quarantineLeave,
		WaitStart: o.waitStart, WaitStop: o.waitStop,
	}
}

type observer struct {
	names  bool
	tracer trace.Tracer

	acquireDuration, holdDuration, validityLeft metric.Float64Histogram
	attempts                                    metric.Int64Histogram
	leasesLost, nodeErrors                      metric.Int64Counter
	quarantined, waiters                        metric.Int64UpDownCounter
}

// Bucket boundaries, in seconds: lock waits and holds from a millisecond to
// minutes; validity left from a 10s overrun to a minute left, with a bound
// at 0 so that the count of overruns is one bucket.
var (
	durationBounds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	validityBounds = []float64{-10, -1, -0.1, -0.01, 0, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60}
	attemptBounds  = []float64{1, 2, 3, 5, 10, 20, 50, 100}
)

// create makes the instruments on m.
func (o *observer) create(m metric.Meter) {
	var errs []error
	f64 := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	o.acquireDuration = f64("quorumlock.acquire.duration", "How long lock calls took, by outcome.", durationBounds)
	o.holdDuration = f64("quorumlock.hold.duration", "How long locks were held, recorded at release.", durationBounds)
	o.validityLeft = f64("quorumlock.release.validity_left",
		"The validity left when a release started; negative: the work overran it and may have overlapped another owner's.", validityBounds)
	var err error
	o.attempts, err = m.Int64Histogram("quorumlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of lock calls, by outcome."), metric.WithExplicitBucketBoundaries(attemptBounds...))
	errs = append(errs, err)
	o.leasesLost, err = m.Int64Counter("quorumlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost while held, by cause."))
	errs = append(errs, err)
	o.nodeErrors, err = m.Int64Counter("quorumlock.node.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed or late answers of a node to lock operations."))
	errs = append(errs, err)
	o.quarantined, err = m.Int64UpDownCounter("quorumlock.node.quarantined", metric.WithUnit("{node}"),
		metric.WithDescription("Nodes kept out of majorities by the restart quarantine."))
	errs = append(errs, err)
	o.waiters, err = m.Int64UpDownCounter("quorumlock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Lock calls waiting for a lock held by another owner."))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			otel.Handle(err)
		}
	}
}

// lockAttrs are the attributes of a call of c, plus extra.
func (o *observer) lockAttrs(c redlock.Call, extra ...attribute.KeyValue) metric.MeasurementOption {
	attrs := append(extra, primitiveKey.String(c.Primitive))
	if o.names {
		attrs = append(attrs, nameKey.String(c.Name))
	}
	return metric.WithAttributes(attrs...)
}

func (o *observer) start(ctx context.Context, c redlock.Call) context.Context {
	attrs := []attribute.KeyValue{primitiveKey.String(c.Primitive)}
	if o.names {
		attrs = append(attrs, nameKey.String(c.Name))
	}
	ctx, _ = o.tracer.Start(ctx, "quorumlock."+string(c.Op), trace.WithAttributes(attrs...))
	return ctx
}

func (o *observer) done(ctx context.Context, c redlock.Call, r redlock.Result) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(outcomeKey.String(string(r.Outcome)), attemptsKey.Int(r.Attempts))
	if len(r.FailedNodes) > 0 {
		span.SetAttributes(failedNodesKey.StringSlice(r.FailedNodes))
	}
	if r.Outcome == redlock.OutcomeUnavailable || r.Outcome == redlock.OutcomeNotHeld {
		msg := string(r.Outcome)
		if o.names && r.Err != nil {
			msg = r.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
	if c.Op != redlock.OpLock && c.Op != redlock.OpTryLock {
		return
	}
	attrs := o.lockAttrs(c, outcomeKey.String(string(r.Outcome)))
	o.acquireDuration.Record(ctx, r.Duration.Seconds(), attrs)
	o.attempts.Record(ctx, int64(r.Attempts), attrs)
}

func (o *observer) released(ctx context.Context, c redlock.Call, r redlock.Release) {
	attrs := o.lockAttrs(c)
	o.holdDuration.Record(ctx, r.Held.Seconds(), attrs)
	o.validityLeft.Record(ctx, r.ValidityLeft.Seconds(), attrs)
}

func (o *observer) leaseLost(l redlock.LeaseLoss) {
	c := redlock.Call{Primitive: l.Primitive, Name: l.Name}
	o.leasesLost.Add(context.Background(), 1, o.lockAttrs(c, causeKey.String(string(l.Cause))))
}

func (o *observer) nodeError(e redlock.NodeFailure) {
	attrs := append(server(e.Node), semconv.ErrorTypeKey.String(e.Type))
	o.nodeErrors.Add(context.Background(), 1, metric.WithAttributes(attrs...))
}

func (o *observer) quarantineEnter(node string, _ time.Time) {
	o.quarantined.Add(context.Background(), 1, metric.WithAttributes(server(node)...))
}

func (o *observer) quarantineLeave(node string) {
	o.quarantined.Add(context.Background(), -1, metric.WithAttributes(server(node)...))
}

func (o *observer) waitStart(c redlock.Call) { o.waiters.Add(context.Background(), 1, o.lockAttrs(c)) }
func (o *observer) waitStop(c redlock.Call)  { o.waiters.Add(context.Background(), -1, o.lockAttrs(c)) }

// server returns the attributes of a node's address: server.address and
// server.port for host:port or a URL (as redlock.NewFromURLs names nodes;
// its user and masked password are left out), else server.address alone (a
// Sentinel or Cluster node is named by its kind and position).
func server(node string) []attribute.KeyValue {
	hostport := node
	if u, err := url.Parse(node); err == nil && u.Host != "" {
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if p, perr := strconv.Atoi(port); err == nil && perr == nil {
		return []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(p)}
	}
	return []attribute.KeyValue{semconv.ServerAddress(node)}
}
