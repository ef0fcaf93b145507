package groupwatch

import "slices"

// An owner is the member a classic generation's SyncGroup gave a partition to.
type owner struct {
	instance, memberID string
}

// A NonOwnerCommit is an accepted commit of a partition that its committer did not own
// in the commit's generation.
type NonOwnerCommit struct {
	Commit
	// OwnerInstance owned the partition in that generation; empty when nobody did.
	OwnerInstance string
}

// Ownership is the verdict on the accepted commits of one topic.
type Ownership struct {
	// Judged counts the accepted commits whose generation the tap saw assigned.
	Judged int
	// Unjudged counts the accepted commits of a generation (or member epoch) whose
	// assignments the tap never saw (a member that joined through another path).
	Unjudged int
	// NonOwner lists the judged commits of a partition that somebody else owned, or
	// nobody did.
	NonOwner []NonOwnerCommit
}

// NonOwnerCommits judges every accepted commit of topic by the assignments of its own
// generation, which the broker checked (it refuses a commit whose member id and
// generation are not current) but whose partitions it did not: the broker stores a
// current member's commit of any partition, under either protocol.
//
// The cooperative protocol hands a partition over in two generations: in the first its
// owner gives it up and nobody has it, in the next its new owner gets it. The old owner
// commits what it processed in between (franz-go calls OnPartitionsRevoked after the
// first SyncGroup), so a partition that nobody has in a generation counts as its owner's
// of the generation before.
//
// Under KIP-848 a commit carries its member's own epoch, so it is judged by that
// member's assignments in that epoch: a partition it held at any time in the epoch is
// its own. The broker gives a member the partitions to give up in an answer of the
// same epoch, and assigns them to another member only once the first has let them go,
// so the old owner's handover commit is in an epoch that had them.
func (h History) NonOwnerCommits(topic string) Ownership {
	owners := map[int32]map[int32]owner{} // generation -> partition -> owner
	held := map[memberEpoch]map[int32]bool{}
	for _, a := range h.Assignments {
		if a.MemberEpoch {
			key := memberEpoch{a.MemberID, a.Generation}
			if held[key] == nil {
				held[key] = map[int32]bool{}
			}
			for _, p := range a.Partitions[topic] {
				held[key][p] = true
			}
			continue
		}
		byPartition := owners[a.Generation]
		if byPartition == nil {
			byPartition = map[int32]owner{}
			owners[a.Generation] = byPartition
		}
		for _, p := range a.Partitions[topic] {
			byPartition[p] = owner{instance: a.Instance, memberID: a.MemberID}
		}
	}
	var o Ownership
	for _, c := range h.Commits {
		if !c.Accepted() || (c.Topic != topic && c.Topic != "") {
			continue
		}
		if partitions, ok := held[memberEpoch{c.MemberID, c.Generation}]; ok {
			o.Judged++
			if !partitions[c.Partition] {
				o.NonOwner = append(o.NonOwner, NonOwnerCommit{Commit: c, OwnerInstance: h.heldBy(topic, c.Partition, c.SentAtS)})
			}
			continue
		}
		byPartition, seen := owners[c.Generation]
		if !seen {
			o.Unjudged++
			continue
		}
		o.Judged++
		who, ok := byPartition[c.Partition]
		if !ok {
			who = owners[c.Generation-1][c.Partition] // being handed over: see above
		}
		if who.memberID != c.MemberID {
			o.NonOwner = append(o.NonOwner, NonOwnerCommit{Commit: c, OwnerInstance: who.instance})
		}
	}
	return o
}

// memberEpoch names one epoch of one KIP-848 member.
type memberEpoch struct {
	memberID string
	epoch    int32
}

// heldBy is the instance whose latest KIP-848 assignment before atS had the partition,
// or "" if none did.
func (h History) heldBy(topic string, partition int32, atS float64) string {
	latest := map[string]Assignment{} // member id -> its latest assignment
	for _, a := range h.Assignments {
		if a.MemberEpoch && a.AtS <= atS {
			latest[a.MemberID] = a
		}
	}
	for _, a := range latest {
		if slices.Contains(a.Partitions[topic], partition) {
			return a.Instance
		}
	}
	return ""
}

// Protocols counts the joins by the protocol they went through (Join.Protocol).
func (h History) Protocols() map[string]int {
	out := map[string]int{}
	for _, j := range h.Joins {
		out[j.Protocol]++
	}
	return out
}

// LateCommits returns the commit attempts that instance sent after resumedAtS under the
// member id and generation it held when it was frozen at frozenAtS: a zombie's commits
// for a session the group has ended meanwhile. The broker should refuse every one.
func (h History) LateCommits(instance string, frozenAtS, resumedAtS float64) []Commit {
	var held *Join
	for i, j := range h.Joins {
		if j.Instance == instance && j.AtS <= frozenAtS {
			held = &h.Joins[i]
		}
	}
	if held == nil {
		return nil
	}
	var late []Commit
	for _, c := range h.Commits {
		if c.Instance == instance && c.SentAtS >= resumedAtS && c.MemberID == held.MemberID && c.Generation == held.Generation {
			late = append(late, c)
		}
	}
	return late
}

// Instances maps the member ids the tap saw to the instances that joined with them.
func (h History) Instances() map[string]string {
	out := map[string]string{}
	for _, j := range h.Joins {
		out[j.MemberID] = j.Instance
	}
	return out
}

// Owned returns the partitions of topic that instance's latest assignment gave it.
func (h History) Owned(instance, topic string) []int32 {
	for i := len(h.Assignments) - 1; i >= 0; i-- {
		if a := h.Assignments[i]; a.Instance == instance {
			return a.Partitions[topic]
		}
	}
	return nil
}
