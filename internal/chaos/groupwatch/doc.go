// Package groupwatch watches a consumer group from outside, for the scenarios that run
// several consumer instances in one group: who owned which partition when, and which
// offsets each instance committed.
//
// Start with tap.go: a Tap sits between the instances and the broker, one listener per
// instance, and records the group protocol as it passes (History: joins, assignments
// per generation, every offset commit with the broker's answer). ownership.go judges
// that record: commits of a partition the committer did not own in the commit's
// generation (NonOwnerCommits), and a resumed zombie's commits for a session that had
// ended (LateCommits). view.go is the harness's second, independent view: the group as
// DescribeGroups shows it every 100 ms, with the rebalances and the partitions that
// moved while records waited for them.
package groupwatch
