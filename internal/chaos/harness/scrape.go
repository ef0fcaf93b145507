package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ScrapeCounter sums every sample of the named metrics in a Prometheus text exposition
// at url (all label sets). ok is false when none of the metrics is exposed.
func ScrapeCounter(ctx context.Context, url string, names ...string) (sum int, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	var total float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		for _, want := range names {
			if name != want {
				continue
			}
			// With labels the value follows the closing brace.
			if i := strings.LastIndex(line, "}"); i >= 0 {
				rest = line[i+1:]
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				total += v
				ok = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	return int(total), ok, nil
}
