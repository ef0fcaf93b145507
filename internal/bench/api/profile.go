package api

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// maxProfileSeconds bounds the profile: the API's admin server answers within its
// WriteTimeout, 15 s.
const maxProfileSeconds = 12

// profileAPI attacks srv once more for cfg.duration and writes a CPU profile of the
// API process, taken during the attack from its admin listener, to cfg.cpuProfile.
func profileAPI(srv apiServer, cfg apiBenchConfig, stdout io.Writer) error {
	seconds := min(int(cfg.duration.Seconds()), maxProfileSeconds)
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", srv.admin, seconds), nil)
	if err != nil {
		return fmt.Errorf("profile request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.adminToken)
	profile := make(chan error, 1)
	go func() { profile <- fetchProfile(req, cfg.cpuProfile) }()
	a, err := attackAPI(srv, time.Duration(seconds)*time.Second)
	if err != nil {
		return fmt.Errorf("attack while profiling: %w", err)
	}
	if err := <-profile; err != nil {
		return err
	}
	fmt.Fprintf(stdout, "profiled API:       %6.0f payments/s; CPU profile of the API process in %s (go tool pprof -top %s)\n",
		a.PaymentsPerSecond, cfg.cpuProfile, cfg.cpuProfile)
	return nil
}

// fetchProfile sends req and writes the profile it answers to path.
func fetchProfile(req *http.Request, path string) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("fetch CPU profile: %s: %s", resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write CPU profile: %w", err)
	}
	return f.Close()
}
