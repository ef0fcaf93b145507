package harness

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// Several consumer instances in one group (Scenario.Consumers): the same command
// started N times with the contract's environment, as an operator scales a service
// out. They share the consumer database and the group; each has its own HTTP_ADDR and
// reaches the broker through its own listener of the group tap, so that the harness
// knows which process committed what (groupwatch.Tap).

// consumerInstanceName names the i-th instance (from 1): "consumer", then
// "consumer-2", "consumer-3" ..., as their logs are named.
func consumerInstanceName(i int) string {
	if i == 1 {
		return "consumer"
	}
	return fmt.Sprintf("consumer-%d", i)
}

// startConsumerTap starts the tap in front of the run's broker; the instances are
// routed through it by newConsumerInstance.
func (rn *Run) startConsumerTap(origin time.Time, logger *slog.Logger) {
	rn.GroupTap = groupwatch.NewTap(rn.Brokers[0], origin, logger)
}

// newConsumerInstance returns the next instance of the consumer, not started: a copy
// of the first one's command and environment with an address of its own and, with a
// tap, its own listener as KAFKA_BROKERS.
func (rn *Run) newConsumerInstance() (*stack.Process, error) {
	first := rn.Consumer
	name := consumerInstanceName(len(rn.Consumers) + 1)
	addr := strings.TrimPrefix(first.BaseURL, "http://")
	if len(rn.Consumers) > 0 {
		var err error
		if addr, err = stack.FreeAddr(); err != nil {
			return nil, err
		}
	}
	env := slices.DeleteFunc(slices.Clone(first.Env), func(kv string) bool {
		return strings.HasPrefix(kv, "HTTP_ADDR=") || (rn.GroupTap != nil && strings.HasPrefix(kv, "KAFKA_BROKERS="))
	})
	env = append(env, "HTTP_ADDR="+addr)
	if rn.GroupTap != nil {
		seed, err := rn.GroupTap.Listen(name)
		if err != nil {
			return nil, err
		}
		env = append(env, "KAFKA_BROKERS="+seed)
	}
	p := &stack.Process{Name: name, LogPath: filepath.Join(rn.logDir, name+".log"), BaseURL: "http://" + addr, Argv: first.Argv, Env: env}
	if len(rn.Consumers) == 0 {
		rn.Consumer = p
	}
	rn.Consumers = append(rn.Consumers, p)
	return p, nil
}

// AddConsumer starts one more consumer instance in the group and waits for its
// /healthz: scaling out during the run.
func (rn *Run) AddConsumer(ctx context.Context) (*stack.Process, error) {
	rn.mu.Lock()
	p, err := rn.newConsumerInstance()
	rn.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return p, p.WaitHealthy(ctx)
}

// ConsumerInstances returns the consumer instances started so far, stopped ones too.
func (rn *Run) ConsumerInstances() []*stack.Process {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return slices.Clone(rn.Consumers)
}

// nonOwnerCommitsCheck is the SLO row of a run with several instances: no instance
// commits an offset for a partition that, in the generation its commit carries, the
// group had given to another member (see groupwatch.History.NonOwnerCommits). Such a
// commit moves the new owner's position under its feet: back, and it reads again, or
// forward, past records nobody processed.
func nonOwnerCommitsCheck(rn *Run) verdict.Check {
	const name, want = "offsets committed by an instance for a partition it did not own (group tap: the commit's generation or member epoch vs the assignments the broker gave it)", "0"
	h := rn.GroupTap.History()
	o := h.NonOwnerCommits(rn.Topic)
	got := fmt.Sprintf("%d of %d accepted commits judged", len(o.NonOwner), o.Judged)
	if o.Unjudged > 0 {
		got += fmt.Sprintf(" (%d in generations whose assignments the tap did not see)", o.Unjudged)
	}
	if len(o.NonOwner) > 0 {
		c := o.NonOwner[0]
		owner := cmp.Or(c.OwnerInstance, "nobody")
		got += fmt.Sprintf("; first: %s committed partition %d offset %d at %.1fs in generation %d, owned by %s", c.Instance, c.Partition, c.Offset, c.SentAtS, c.Generation, owner)
	}
	if o.Judged == 0 {
		// Nothing judged says nothing about the service: the tap could not read the
		// group's assignments (or no commit was made), so the run is invalid, not failed.
		return verdict.NewCheck(verdict.Validity, name, want, got+": no commit judged", false)
	}
	return verdict.NewCheck(verdict.SLO, name, want, got, len(o.NonOwner) == 0)
}
