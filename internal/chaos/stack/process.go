package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A Process is one service (the API or the consumer) run as a real OS process, so the
// harness can SIGKILL it the way a crash or an OOM kill would. It runs in a process
// group of its own and every signal goes to the whole group: a student's command is
// often a shell or a script that starts the real server as its child, and killing
// only the parent would leave that child serving.
type Process struct {
	// Name is used in logs and disruptions ("api", "consumer").
	Name string
	// Argv is the program and its arguments: a binary of ours, or /bin/sh -c and a
	// student's command line (see ServiceCommands). Empty for a process somebody else
	// runs, which the harness cannot start or kill.
	Argv []string
	// Env is added to the harness's own environment.
	Env []string
	// LogPath receives the process's stdout and stderr, appended across restarts.
	LogPath string
	// BaseURL is where it serves HTTP, e.g. http://127.0.0.1:41234; /healthz is polled.
	BaseURL string
	// AdminURL is where it serves /metrics and /admin/, when not at BaseURL: our API
	// serves them on a listener of their own (ADMIN_ADDR). Empty: BaseURL.
	AdminURL string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current incarnation exits
}

// MetricsBase is the base URL of the process's /metrics and /admin/ endpoints.
func (p *Process) MetricsBase() string {
	if p.AdminURL != "" {
		return p.AdminURL
	}
	return p.BaseURL
}

// Start starts a new incarnation. It does not wait for health; see WaitHealthy.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("start %s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.Name, err)
	}
	if len(p.Argv) == 0 {
		return fmt.Errorf("start %s: no command: it is run by somebody else", p.Name)
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	// The goroutine's owner is the incarnation: it ends when the process does.
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

// Exited is closed when the current incarnation exits, for whatever reason.
func (p *Process) Exited() <-chan struct{} {
	_, exited := p.current()
	return exited
}

// current returns the current incarnation; cmd is nil before the first Start.
func (p *Process) current() (*exec.Cmd, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.exited
}

// Pid returns the process id of the current incarnation, 0 before the first Start.
func (p *Process) Pid() int {
	cmd, _ := p.current()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Kill sends SIGKILL, the crash the scenarios simulate: no shutdown hook runs, no
// batch is recorded, no offset is committed (the database rolls back what the process
// had open as its connections close). It waits for the process to be gone.
func (p *Process) Kill() error {
	cmd, exited := p.current()
	if cmd == nil {
		return nil
	}
	if err := signalGroup(cmd, exited, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	<-exited
	return nil
}

// signalGroup sends sig to the process group of cmd (its pid, see Setpgid in Start),
// unless the incarnation has already exited and been reaped: its pid may then belong
// to somebody else.
func signalGroup(cmd *exec.Cmd, exited <-chan struct{}, sig syscall.Signal) error {
	select {
	case <-exited:
		return nil
	default:
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the whole group is gone already
	}
	return err
}

// Freeze stops the process group (SIGSTOP) where it stands, so the harness can look at
// what it has committed so far; Thaw (SIGCONT) lets it go on as if nothing happened.
func (p *Process) Freeze() error { return p.signal(syscall.SIGSTOP, "freeze") }

// Thaw continues a frozen process group.
func (p *Process) Thaw() error { return p.signal(syscall.SIGCONT, "thaw") }

// signal sends sig to the current incarnation's group, if there is one.
func (p *Process) signal(sig syscall.Signal, verb string) error {
	cmd, exited := p.current()
	if cmd == nil {
		return nil
	}
	if err := signalGroup(cmd, exited, sig); err != nil {
		return fmt.Errorf("%s %s: %w", verb, p.Name, err)
	}
	return nil
}

// Stop asks for a graceful shutdown (SIGTERM) and kills the process if it is still
// there after grace.
func (p *Process) Stop(grace time.Duration) error {
	cmd, exited := p.current()
	if cmd == nil {
		return nil
	}
	if err := signalGroup(cmd, exited, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		return nil
	case <-timer.C:
		return p.Kill()
	}
}

// WaitHealthy polls /healthz until it answers 200, the process exits, or ctx ends.
func (p *Process) WaitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	exited := p.Exited()
	for {
		resp, err := client.Get(p.BaseURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s /healthz (log %s): %w", p.Name, p.LogPath, ctx.Err())
		case <-exited:
			return fmt.Errorf("%s exited before it was healthy; see %s", p.Name, p.LogPath)
		case <-ticker.C:
		}
	}
}

// FreeAddr returns a loopback address with a port nobody listens on right now. The
// services take their address from the environment, so port 0 cannot be used; the
// small race with another process taking the port is acceptable for a harness.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
