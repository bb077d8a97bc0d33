package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// Charger is what Payments needs of the payment provider.
type Charger interface {
	Charge(ctx context.Context, id string, amountCents int64) (Receipt, error)
}

// ProviderHandler serves ledger over HTTP, as the payment provider the
// server processes call: POST /charge?id=...&amount_cents=... answers the
// receipt as JSON, or 502 with the ledger's error.
func ProviderHandler(ledger *Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charge", func(w http.ResponseWriter, r *http.Request) {
		amount, err := strconv.ParseInt(r.FormValue("amount_cents"), 10, 64)
		if err != nil {
			http.Error(w, "bad amount_cents", http.StatusBadRequest)
			return
		}
		receipt, err := ledger.Charge(r.Context(), r.FormValue("id"), amount)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, http.StatusOK, receipt)
	})
	return mux
}

// Provider is a Charger that calls a ProviderHandler at URL.
type Provider struct {
	URL    string
	Client *http.Client
}

func (p *Provider) Charge(ctx context.Context, id string, amountCents int64) (Receipt, error) {
	q := url.Values{"id": {id}, "amount_cents": {strconv.FormatInt(amountCents, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/charge?"+q.Encode(), nil)
	if err != nil {
		return Receipt{}, err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return Receipt{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Receipt{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Receipt{}, fmt.Errorf("payment provider: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var r Receipt
	return r, json.Unmarshal(b, &r)
}

// The environment of a server process (see startServerProcess).
const (
	envServe    = "HTTP409_SERVE"    // its name in logs; set: this process is a server
	envNodes    = "HTTP409_NODES"    // the lock nodes' URLs, comma-separated
	envProvider = "HTTP409_PROVIDER" // the payment provider's base URL
)

// serverProcess is a Payments server running in a process of its own.
type serverProcess struct {
	base string // its URL
	cmd  *exec.Cmd
	stop io.Closer // its stdin: closing it ends the server
}

// startServerProcess starts this program again as a Payments server named
// name, over the lock nodes at nodes, charging through the provider at
// provider, and returns once it listens. Its log goes to logs.
func startServerProcess(name string, nodes []string, provider string, logs io.Writer) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envServe+"="+name, envNodes+"="+strings.Join(nodes, ","), envProvider+"="+provider)
	cmd.Stderr = logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s exited before it listened: %w", name, err)
	}
	return &serverProcess{base: strings.TrimSpace(line), cmd: cmd, stop: stdin}, nil
}

// close ends the server process and waits for it.
func (s *serverProcess) close() error {
	_ = s.stop.Close()
	return s.cmd.Wait()
}

// serveMain is main in a server process: serve until stdin closes.
func serveMain() int {
	name := os.Getenv(envServe)
	logger := log.New(os.Stderr, name+": ", 0)
	ctx := context.Background()
	rs, err := redlock.NewFromURLs(ctx, strings.Split(os.Getenv(envNodes), ","), lockOptions...)
	if err != nil {
		logger.Print(err)
		return 1
	}
	defer rs.Close()
	client, closeClient := newClient()
	defer closeClient()
	payments := &Payments{
		Locks:      rs,
		Ledger:     &Provider{URL: os.Getenv(envProvider), Client: client},
		TTL:        10 * time.Second,
		RetryAfter: 500 * time.Millisecond,
		Log:        logger,
	}
	base, shutdown, err := serve(payments.Routes())
	if err != nil {
		logger.Print(err)
		return 1
	}
	defer shutdown()
	fmt.Println(base)
	_, err = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	if err != nil && !errors.Is(err, os.ErrClosed) {
		logger.Print(err)
	}
	return 0
}
