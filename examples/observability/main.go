// Command observability shows the metrics of a service's locks: it serves
// /metrics through the OpenTelemetry Prometheus exporter while workers
// contend for a lock, a job overruns its lock's validity and, half way, one
// of the nodes stops (embedded nodes only); then it prints the quorumlock_
// series it served. From this directory (a module of its own, so that the
// library's go.mod carries neither OpenTelemetry nor Prometheus):
//
//	go run .
//	go run . -duration 0 -addr 127.0.0.1:9464   # serve until Ctrl-C; curl it
//	go run . -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//
// Without -nodes it uses 5 embedded Redis nodes started in the process.
// docs/operations.md, "What to monitor", gives alert rules for these series.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/otelquorumlock"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	// go-redis logs every refused dial; the stopped node is in the metrics.
	redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial", "changed by hook to CLOSED"}))
	nodes := demo.NodesFlag()
	addr := flag.String("addr", "127.0.0.1:0", "where to serve /metrics (port 0: a free one)")
	duration := flag.Duration("duration", 3*time.Second, "how long the workers contend; 0: until interrupted")
	quarantine := flag.Duration("quarantine", 0, "redlock.WithRestartQuarantine for real nodes (miniredis has no INFO), at least the workers' 8s TTL; 0: off")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{urls: *nodes, addr: *addr, duration: *duration, quarantine: *quarantine}
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

type config struct {
	urls       string        // node URLs, comma-separated; "": embedded nodes
	addr       string        // where to serve /metrics
	duration   time.Duration // of the contention; 0: until ctx ends
	quarantine time.Duration // WithRestartQuarantine; 0: off
	fault      func()        // called half way; nil: stop an embedded node, if any
}

// run serves the metrics while the workers contend, then scrapes them and
// prints the quorumlock_ series (not the histograms' buckets). It fails
// unless every instrument every run records is there.
func run(ctx context.Context, out io.Writer, cfg config) error {
	urls, stop, err := nodes(&cfg)
	if err != nil {
		return err
	}
	defer stop()
	svc, err := start(ctx, urls, cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	fmt.Fprintf(out, "serving %s while workers contend for the lock \"report\" on %d nodes\n", svc.URL(), len(urls))
	if err := svc.contend(ctx, out, cfg.duration, cfg.fault); err != nil {
		return err
	}
	body, err := scrape(context.WithoutCancel(ctx), svc.URL())
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nthe quorumlock_ series served (buckets left out):")
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "quorumlock_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprint(out, "  ", line)
		}
	}
	if missing := missing(body, expected()); len(missing) > 0 {
		return fmt.Errorf("series missing from /metrics: %s", strings.Join(missing, ", "))
	}
	return nil
}

// nodes returns the nodes' URLs: cfg.urls, or those of 5 embedded nodes,
// the last of which cfg.fault stops unless it is set.
func nodes(cfg *config) ([]string, func(), error) {
	if cfg.urls != "" {
		return strings.Split(cfg.urls, ","), func() {}, nil
	}
	urls, servers, stop, err := demo.Embedded(5)
	if err != nil {
		return nil, nil, err
	}
	if cfg.fault == nil {
		cfg.fault = servers[len(servers)-1].Close
	}
	return urls, stop, nil
}

// service is the program's lock set, its metrics and their HTTP endpoint.
type service struct {
	rs     *redlock.Redlock
	meters *sdkmetric.MeterProvider
	server *http.Server
	ln     net.Listener
	served chan error
}

// start builds the metrics pipeline (an OpenTelemetry MeterProvider read
// by the Prometheus exporter into a registry of its own), a lock set
// observed by otelquorumlock, and serves the registry on /metrics.
func start(ctx context.Context, urls []string, cfg config) (*service, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	opts := []redlock.Option{
		redlock.WithKeyPrefix("observability:"),
		redlock.WithObserver(otelquorumlock.NewObserver(otelquorumlock.WithMeterProvider(meters))),
	}
	if cfg.quarantine > 0 {
		opts = append(opts, redlock.WithRestartQuarantine(cfg.quarantine))
	}
	rs, err := demo.Open(ctx, urls, opts...)
	if err != nil {
		_ = meters.Shutdown(ctx)
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		_ = rs.Close()
		_ = meters.Shutdown(ctx)
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	s := &service{rs: rs, meters: meters, ln: ln, served: make(chan error, 1),
		server: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { s.served <- s.server.Serve(ln) }()
	return s, nil
}

// URL returns the address of the metrics endpoint.
func (s *service) URL() string { return "http://" + s.ln.Addr().String() + "/metrics" }

// Close stops serving, then releases the locks and the metrics pipeline.
func (s *service) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.server.Shutdown(ctx)
	if served := <-s.served; !errors.Is(served, http.ErrServerClosed) {
		err = errors.Join(err, served)
	}
	return errors.Join(err, s.rs.Close(), s.meters.Shutdown(ctx))
}

// scrape GETs url and returns the body.
func scrape(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// expected returns the series every run records (the quarantine shows
// only when a node is in it: a restarted one, with -quarantine).
func expected() []string {
	return []string{
		"quorumlock_acquire_duration_seconds_count", "quorumlock_acquire_attempts_count",
		"quorumlock_hold_duration_seconds_count", "quorumlock_release_validity_left_seconds_count",
		"quorumlock_lease_lost_total", "quorumlock_waiters",
	}
}

// missing returns the names of expected that no series of body has.
func missing(body string, expected []string) []string {
	var out []string
	for _, name := range expected {
		if !strings.Contains(body, "\n"+name+"{") {
			out = append(out, name)
		}
	}
	return out
}
