package api

// The API's load without the API: pgbench committing the API's transaction
// (pgbenchScript) in the background, for as long as another benchmark measures beside
// it. The relay benchmark runs it on a database of its own on the same server, so
// that its relays share the machine and the server with what the API would make them
// share, without the API's own process (whose speed is the API benchmark's concern).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// loadMaxDuration bounds a load that nobody stops: pgbench ends by itself after it.
const loadMaxDuration = time.Hour

// progressLine is pgbench's report of each second (-P 1): its transactions per second.
var progressLine = regexp.MustCompile(`^progress: [0-9.]+ s, ([0-9.]+) tps`)

// Load is a running pgbench load; Stop ends it.
type Load struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	script string
	// done is closed once pgbench's progress output has ended; tps holds each second's
	// rate by then.
	done chan struct{}
	mu   sync.Mutex
	tps  []float64
}

// StartLoad starts pgbench with clients connections on dbURL, which has the payments
// migrations, committing the API's transaction as fast as it can until Stop.
func StartLoad(ctx context.Context, dbURL string, clients int) (*Load, error) {
	if clients < 1 {
		return nil, fmt.Errorf("load with %d clients: want at least 1", clients)
	}
	script, err := writePgbenchScript(pgbenchScript)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel, script: script, done: make(chan struct{})}
	l.cmd = pgbenchCommand(ctx, script, dbURL, clients, loadMaxDuration, "-P", "1")
	// pgbench ends at SIGINT, as at Ctrl-C; its progress lines are what it leaves.
	l.cmd.Cancel = func() error { return l.cmd.Process.Signal(os.Interrupt) }
	l.cmd.WaitDelay = 5 * time.Second
	progress, err := l.cmd.StderrPipe()
	if err != nil {
		l.abort()
		return nil, fmt.Errorf("pgbench stderr: %w", err)
	}
	if err := l.cmd.Start(); err != nil {
		l.abort()
		return nil, fmt.Errorf("start pgbench: %w", err)
	}
	go l.readProgress(progress)
	return l, nil
}

func (l *Load) abort() {
	l.cancel()
	os.Remove(l.script)
}

// readProgress keeps each second's rate from pgbench's progress lines until its output
// ends.
func (l *Load) readProgress(r io.Reader) {
	defer close(l.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := progressLine.FindStringSubmatch(sc.Text()); m != nil {
			tps, _ := strconv.ParseFloat(m[1], 64) // the pattern admits only numbers
			l.mu.Lock()
			l.tps = append(l.tps, tps)
			l.mu.Unlock()
		}
	}
}

// LoadResult is what a load did while it ran.
type LoadResult struct {
	// TransactionsPerSecond is the mean of pgbench's per-second rates.
	TransactionsPerSecond float64
	Seconds               int // seconds that pgbench reported
}

// Stop ends the load and reports its rate. A load that had ended by itself before Stop
// (pgbench failed) is an error: whatever was measured beside it was not measured
// beside the load.
func (l *Load) Stop() (LoadResult, error) {
	defer os.Remove(l.script)
	exited := false
	select {
	case <-l.done: // its output ended: it had exited
		exited = true
	default:
	}
	l.cancel()
	<-l.done
	waitErr := l.cmd.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if exited {
		return LoadResult{}, fmt.Errorf("pgbench ended before it was stopped: %v", waitErr)
	}
	if len(l.tps) == 0 {
		return LoadResult{}, errors.New("pgbench reported no progress while it ran")
	}
	var sum float64
	for _, tps := range l.tps {
		sum += tps
	}
	return LoadResult{TransactionsPerSecond: sum / float64(len(l.tps)), Seconds: len(l.tps)}, nil
}
