// Package delivery is what the two relays (package poll and package cdc) share: the
// same contract, so the same rules, in one place. It decides nothing about when to
// claim or stream; it holds
//
//   - the rejection rule (IsRejection): which broker errors count towards the DLQ;
//   - the partition breaker (PartitionBreaker): one partition that stops answering
//     must not hold the others' events;
//   - the producer options (ClientOpts) and the publish timeout's back-off
//     (PublishTimeouts);
//   - the mark that moves acknowledged events to outbox_published (MarkByIDSQL, MarkByTIDSQL) and
//     the backlog's figures (PendingMonitor);
//   - the dead-letter alert (Alerter), signed as Standard Webhooks does when given a
//     secret (package webhooksig), and the metrics both relays report (Metrics).
package delivery
