package groupwatch

import (
	"encoding/binary"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// pendingRequest is what the tap keeps of a request until its answer passes: how to
// read the answer, and the decoded request when the answer alone does not say enough
// (a SyncGroup answer carries no member id, an OffsetCommit answer no offsets, a
// heartbeat answer may leave out the member id).
type pendingRequest struct {
	correlationID int32
	key, version  int16
	flexible      bool
	decoded       kmsg.Request
	sentAtS       float64
}

// The keys of the requests whose answers the tap reads.
var (
	keyFetch           = kmsg.NewPtrFetchRequest().Key()
	keyMetadata        = kmsg.NewPtrMetadataRequest().Key()
	keyOffsetCommit    = kmsg.NewPtrOffsetCommitRequest().Key()
	keyFindCoordinator = kmsg.NewPtrFindCoordinatorRequest().Key()
	keyJoinGroup       = kmsg.NewPtrJoinGroupRequest().Key()
	keySyncGroup       = kmsg.NewPtrSyncGroupRequest().Key()
	keyAPIVersions     = kmsg.NewPtrApiVersionsRequest().Key()
	keyHeartbeat848    = kmsg.NewPtrConsumerGroupHeartbeatRequest().Key()
)

var errShortFrame = errors.New("short frame")

// parseRequest reads a request frame's header (request header v1 or v2: key, version,
// correlation id, client id, and tagged fields when the request is flexible) and
// decodes the body of the requests whose answers need it.
func parseRequest(frame []byte) (pendingRequest, error) {
	b := frame[4:]
	if len(b) < 10 {
		return pendingRequest{}, errShortFrame
	}
	req := pendingRequest{
		key:           int16(binary.BigEndian.Uint16(b[0:2])),
		version:       int16(binary.BigEndian.Uint16(b[2:4])),
		correlationID: int32(binary.BigEndian.Uint32(b[4:8])),
	}
	kind := kmsg.RequestForKey(req.key)
	if kind == nil {
		return req, nil // a key this kmsg does not know: forwarded, not read
	}
	kind.SetVersion(req.version)
	req.flexible = kind.IsFlexible()
	if req.key != keyOffsetCommit && req.key != keySyncGroup && req.key != keyHeartbeat848 {
		return req, nil
	}
	body := b[8:]
	clientIDLen := int(int16(binary.BigEndian.Uint16(body[0:2])))
	body = body[2:]
	if clientIDLen > 0 {
		if clientIDLen > len(body) {
			return req, errShortFrame
		}
		body = body[clientIDLen:]
	}
	if req.flexible {
		var err error
		if body, err = skipTags(body); err != nil {
			return req, err
		}
	}
	if err := kind.ReadFrom(body); err != nil {
		return req, err
	}
	req.decoded = kind
	return req, nil
}

// skipTags skips a tagged-field section: a count, then each tag's id, size and bytes.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errShortFrame
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errShortFrame
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, errShortFrame
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// answered handles the answer to req and returns the frame to pass on: rewritten for
// the answers that carry broker addresses, unchanged for every other.
func (t *Tap) answered(c *tapConn, req pendingRequest, frame []byte) []byte {
	switch req.key {
	case keyMetadata, keyFindCoordinator, keyJoinGroup, keySyncGroup, keyHeartbeat848, keyOffsetCommit, keyFetch:
	default:
		return frame
	}
	if req.key == keyFetch && !t.armed(c.instance) {
		return frame // Fetch answers are large: read only when a freeze waits for one
	}
	// The answer header is the correlation id, plus tagged fields when the request is
	// flexible, except ApiVersions' (always header v0).
	headerEnd := 8
	body := frame[8:]
	if req.flexible && req.key != keyAPIVersions {
		rest, err := skipTags(body)
		if err != nil {
			return frame
		}
		headerEnd = len(frame) - len(rest)
		body = rest
	}
	resp := kmsg.ResponseForKey(req.key)
	resp.SetVersion(req.version)
	if err := resp.ReadFrom(body); err != nil {
		t.logger.Warn("decode an answer", slog.Int("key", int(req.key)), slog.Int("version", int(req.version)), slog.Any("err", err))
		return frame
	}
	switch resp := resp.(type) {
	case *kmsg.MetadataResponse:
		t.recordTopicIDs(resp)
		host, port := c.advertised()
		for i := range resp.Brokers {
			resp.Brokers[i].Host, resp.Brokers[i].Port = host, port
		}
		return reframe(frame[:headerEnd], resp)
	case *kmsg.FindCoordinatorResponse:
		host, port := c.advertised()
		resp.Host, resp.Port = host, port
		for i := range resp.Coordinators {
			resp.Coordinators[i].Host, resp.Coordinators[i].Port = host, port
		}
		return reframe(frame[:headerEnd], resp)
	case *kmsg.JoinGroupResponse:
		t.recordJoin(c.instance, resp)
	case *kmsg.SyncGroupResponse:
		if sync, ok := req.decoded.(*kmsg.SyncGroupRequest); ok {
			t.recordSync(c.instance, sync, resp)
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if hb, ok := req.decoded.(*kmsg.ConsumerGroupHeartbeatRequest); ok {
			t.recordHeartbeat(c.instance, hb, resp)
		}
	case *kmsg.OffsetCommitResponse:
		if commit, ok := req.decoded.(*kmsg.OffsetCommitRequest); ok {
			t.recordCommit(c.instance, commit, resp, req.sentAtS)
		}
	case *kmsg.FetchResponse:
		if carriesRecords(resp) {
			t.runBeforeRecords(c.instance)
		}
	}
	return frame
}

// reframe encodes resp after the original header and sets the new size.
func reframe(header []byte, resp kmsg.Response) []byte {
	out := append([]byte(nil), header...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out[0:4], uint32(len(out)-4))
	return out
}

// carriesRecords reports whether a Fetch answer holds any record batch.
func carriesRecords(resp *kmsg.FetchResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if len(p.RecordBatches) > 0 {
				return true
			}
		}
	}
	return false
}

// armed reports whether a function waits for instance's next records.
func (t *Tap) armed(instance string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.beforeRecords[instance] != nil
}

// runBeforeRecords runs and disarms the function waiting for instance's next records.
func (t *Tap) runBeforeRecords(instance string) {
	t.mu.Lock()
	fn := t.beforeRecords[instance]
	delete(t.beforeRecords, instance)
	t.mu.Unlock()
	if fn != nil {
		fn()
	}
}
