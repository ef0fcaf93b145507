package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// CreateTopic creates a topic with the broker's default replication factor (1 on the
// native broker) and waits until every partition has a leader: CreateTopics returns once
// the controller has committed the topic, which can be a moment before the broker
// serves it, and a producer that comes first would fail on an unknown partition.
func CreateTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32) error {
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	if err := waitForLeaders(ctx, adm, name, int(partitions)); err != nil {
		return fmt.Errorf("wait for leaders of topic %s: %w", name, err)
	}
	return nil
}

// DeleteTopic deletes a topic.
func DeleteTopic(ctx context.Context, adm *kadm.Client, name string) error {
	resp, err := adm.DeleteTopic(ctx, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	return nil
}

// waitForLeaders polls the topic's metadata every 50 ms until it shows all its
// partitions with a leader, or ctx ends.
func waitForLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil {
			err = details.Error()
		}
		if err == nil {
			ready := 0
			for _, p := range details[topic].Partitions {
				if p.Err == nil && p.Leader >= 0 {
					ready++
				}
			}
			if ready == partitions {
				return nil
			}
			err = fmt.Errorf("%d of %d partitions have a leader", ready, partitions)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}
