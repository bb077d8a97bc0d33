package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// slowNode is an in-process toxiproxy proxy on 127.0.0.1 in front of one
// Redis node, delaying every reply (the "downstream" stream, what the node
// sends back) by a fixed latency. Requests are not delayed.
type slowNode struct {
	proxy *toxiproxy.Proxy
}

// latencyToxic is the JSON that toxiproxy's AddToxicJson reads. Toxicity is
// left out, so it defaults to 1: every connection is slowed.
type latencyToxic struct {
	Name       string           `json:"name"`
	Type       string           `json:"type"`
	Stream     string           `json:"stream"`
	Attributes map[string]int64 `json:"attributes"`
}

// startSlowNode starts a proxy on a free port of 127.0.0.1 that forwards to
// upstream and delays its replies by delay, which must be whole milliseconds
// (toxiproxy's unit). It returns once the proxy accepts connections.
func startSlowNode(upstream string, delay time.Duration) (*slowNode, error) {
	if delay <= 0 || delay%time.Millisecond != 0 {
		return nil, fmt.Errorf("slow node: delay %v is not a positive whole number of milliseconds", delay)
	}
	// A server with no metrics and a silent logger: only its proxy is used,
	// its HTTP API is never started.
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "bench-slow-node", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("slow node: starting the proxy to %s: %w", upstream, err)
	}
	body, err := json.Marshal(latencyToxic{
		Name:       "bench_latency",
		Type:       "latency",
		Stream:     "downstream",
		Attributes: map[string]int64{"latency": delay.Milliseconds()},
	})
	if err == nil {
		_, err = p.Toxics.AddToxicJson(bytes.NewReader(body))
	}
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("slow node: adding the latency: %w", err)
	}
	return &slowNode{proxy: p}, nil
}

// Addr returns the address to dial instead of the upstream node.
func (s *slowNode) Addr() string { return s.proxy.Listen }

// Close stops the proxy: it closes its listener and every connection through
// it. Close the clients that use it first.
func (s *slowNode) Close() { s.proxy.Stop() }
