package rebalance

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// rebalancing says how the scenario changes the group, and keeps what it saw.
type rebalancing struct {
	// Freeze is how long the zombie stays frozen: past the session timeout, so that
	// the group has moved its partitions on when it wakes up.
	Freeze time.Duration
	// Settle bounds each wait for the group to be stable again.
	Settle time.Duration
	// Pause is how long the group runs stable between two changes.
	Pause time.Duration
	// ZombieTries bounds the freezes: one that wakes up without a batch to commit is
	// tried again, while the load lasts.
	ZombieTries int
	// Protocol is the instances' KAFKA_REBALANCE_PROTOCOL, "" for their own.
	Protocol string

	mu sync.Mutex
	ev evidence
}

// evidence is what the disruption did and saw, for the validity rows.
type evidence struct {
	done    []string
	samples []groupwatch.ViewSample
	zombies []zombie
}

// A zombie is one freeze: when the instance was frozen and when it was resumed.
type zombie struct {
	instance              string
	frozenAtS, resumedAtS float64
}

func (r *rebalancing) read() evidence {
	r.mu.Lock()
	defer r.mu.Unlock()
	return evidence{done: slices.Clone(r.ev.done), samples: slices.Clone(r.ev.samples), zombies: slices.Clone(r.ev.zombies)}
}

func (r *rebalancing) did(rn *harness.Run, what, instance string) {
	r.mu.Lock()
	r.ev.done = append(r.ev.done, what+" "+instance)
	r.mu.Unlock()
	rn.Disrupted(what, instance)
}

// disrupt makes the four membership changes one after another, each once the group is
// stable again, and returns after the last (the scenario waits for it).
func (r *rebalancing) disrupt(ctx context.Context, rn *harness.Run) error {
	if rn.GroupTap == nil {
		return fmt.Errorf("consumer-rebalance: no group tap (the harness must start the consumer instances)")
	}
	client, err := kafkasec.NewClient(rn.Brokers, rn.KafkaOpts)
	if err != nil {
		return err
	}
	defer client.Close()
	view := groupwatch.StartView(ctx, client, rn.Topic, rn.Group, rn.Origin, rn.Logger)
	defer func() {
		samples := view.Stop()
		r.mu.Lock()
		r.ev.samples = samples
		r.mu.Unlock()
	}()
	instances := rn.ConsumerInstances()
	steps := []func() error{
		func() error {
			p, err := rn.AddConsumer(ctx)
			if err == nil {
				r.did(rn, "consumer added", p.Name)
			}
			return err
		},
		func() error {
			err := instances[0].Stop(15 * time.Second)
			r.did(rn, "consumer stopped (SIGTERM)", instances[0].Name)
			return err
		},
		func() error {
			err := instances[1].Kill()
			r.did(rn, "consumer killed (SIGKILL)", instances[1].Name)
			return err
		},
		func() error { return r.zombie(ctx, rn, view, instances[2], r.freezeFor(ctx, rn, client)) },
	}
	for _, step := range steps {
		if err := backoff.Until(ctx, time.Now().Add(r.Pause)); err != nil {
			return nil
		}
		// Counted from before the step: a new instance's join can complete the
		// rebalance before AddConsumer returns.
		startS := time.Since(rn.Origin).Seconds()
		if err := step(); err != nil {
			return err
		}
		r.waitStable(ctx, view, startS)
	}
	return nil
}

// zombie freezes p just before records reach it, keeps it frozen past the session
// timeout, and resumes it; it tries again, while the load lasts, when the resumed
// instance committed nothing under its old session (it held no batch).
func (r *rebalancing) zombie(ctx context.Context, rn *harness.Run, view *groupwatch.View, p *stack.Process, freeze time.Duration) error {
	for try := 0; try < r.ZombieTries; try++ {
		frozen := make(chan float64, 1)
		rn.GroupTap.BeforeNextRecords(p.Name, func() {
			if p.Freeze() == nil {
				frozen <- time.Since(rn.Origin).Seconds()
			}
		})
		var frozenAtS float64
		select {
		case frozenAtS = <-frozen:
		case <-time.After(r.Settle):
			rn.GroupTap.BeforeNextRecords(p.Name, nil)
			return nil // no record reached it: the row says so
		case <-ctx.Done():
			return nil
		}
		rn.Disrupted("consumer frozen (SIGSTOP) with records arriving", p.Name)
		waitErr := backoff.Until(ctx, time.Now().Add(freeze))
		if err := p.Thaw(); err != nil {
			return err
		}
		z := zombie{instance: p.Name, frozenAtS: frozenAtS, resumedAtS: time.Since(rn.Origin).Seconds()}
		r.mu.Lock()
		r.ev.zombies = append(r.ev.zombies, z)
		if try == 0 {
			r.ev.done = append(r.ev.done, "consumer SIGSTOPped past the session "+p.Name)
		}
		r.mu.Unlock()
		rn.Disrupted("consumer resumed (SIGCONT)", p.Name)
		if waitErr != nil {
			return nil
		}
		r.waitStable(ctx, view, z.resumedAtS)
		if len(rn.GroupTap.History().LateCommits(z.instance, z.frozenAtS, z.resumedAtS)) > 0 || !rn.Loading() {
			return nil
		}
	}
	return nil
}

// freezeFor is how long the zombie stays frozen: Freeze, past the session timeout the
// instances ask for. A KIP-848 group ignores it: the broker's
// group.consumer.session.timeout.ms (45 s by default) is the session, so the freeze
// is that much longer. The brokers are asked by id: a describe without ids returns
// only the cluster's dynamic defaults, where a value from server.properties is absent.
func (r *rebalancing) freezeFor(ctx context.Context, rn *harness.Run, client *kgo.Client) time.Duration {
	if rn.GroupTap.History().Protocols()[groupwatch.ProtocolConsumer] == 0 {
		return r.Freeze
	}
	session := brokerSessionTimeout(ctx, kadm.NewClient(client))
	return r.Freeze - sessionTimeout + session
}

// kafkaSessionDefault is group.consumer.session.timeout.ms when a broker does not set it.
const kafkaSessionDefault = 45 * time.Second

// brokerSessionTimeout is the longest group.consumer.session.timeout.ms of the
// brokers, or Kafka's default when no broker answers with it.
func brokerSessionTimeout(ctx context.Context, adm *kadm.Client) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return kafkaSessionDefault
	}
	configs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return kafkaSessionDefault
	}
	session := time.Duration(0)
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if ms, err := strconv.Atoi(c.MaybeValue()); c.Key == "group.consumer.session.timeout.ms" && err == nil {
				session = max(session, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	return cmp.Or(session, kafkaSessionDefault)
}

// waitStable waits, up to Settle, until the view has shown the group rebalancing
// since startS and shows it stable again. A killed instance's group stays
// Stable until its session times out, so the last sample alone proves nothing.
func (r *rebalancing) waitStable(ctx context.Context, view *groupwatch.View, startS float64) {
	for deadline := time.Now().Add(r.Settle); time.Now().Before(deadline); {
		samples := view.Samples()
		rebalanced := slices.ContainsFunc(samples, func(s groupwatch.ViewSample) bool { return s.AtS >= startS && s.State != "Stable" })
		if n := len(samples); rebalanced && samples[n-1].State == "Stable" {
			return
		}
		if backoff.Until(ctx, time.Now().Add(groupwatch.ViewEvery)) != nil {
			return
		}
	}
}
