package groupwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// A Tap is a Kafka-protocol relay between the consumer instances and the broker. Each
// instance gets a listener of its own (Listen), so that the tap knows which process
// sent what: the broker only knows member ids, which a client picks itself.
//
// It forwards every byte unchanged but two kinds of answer: Metadata and FindCoordinator
// carry the broker's own address, which the tap replaces with the instance's listener,
// or the client would dial the broker directly after bootstrap and bypass it. On the
// way it records what the group protocol says, which nothing outside the wire keeps:
// who joined with which member id and generation (JoinGroup), which partitions each
// member was given in each generation (SyncGroup), and every offset commit with its
// member id, generation and the broker's answer per partition (OffsetCommit), rejected
// ones included; __consumer_offsets keeps only the commits that were accepted, without
// their generation.
//
// A KIP-848 group has no JoinGroup and SyncGroup: its epochs and assignments travel in
// ConsumerGroupHeartbeat answers, which the tap reads into the same History
// (heartbeat.go).
//
// Limits: one broker (every broker address is rewritten to the one upstream) and
// plaintext (a TLS or SASL connection is forwarded but cannot be read).
type Tap struct {
	upstream string
	origin   time.Time
	logger   *slog.Logger

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	closed    bool
	history   History
	// members is what each instance holds under the consumer protocol (heartbeat.go),
	// and topicNames the topic names of the ids that Metadata answers gave.
	members    map[string]memberState
	topicNames map[[16]byte]string
	// beforeRecords holds, per instance, a function to run once, just before the next
	// Fetch answer with records is passed to that instance (BeforeNextRecords).
	beforeRecords map[string]func()

	wg sync.WaitGroup
}

// NewTap returns a tap in front of the broker at upstream (host:port). Times in its
// History are counted from origin.
func NewTap(upstream string, origin time.Time, logger *slog.Logger) *Tap {
	return &Tap{upstream: upstream, origin: origin, logger: logger.With(slog.String("component", "group_tap")),
		conns: map[net.Conn]struct{}{}, beforeRecords: map[string]func(){},
		members: map[string]memberState{}, topicNames: map[[16]byte]string{}}
}

// Listen opens a listener on a free loopback port for one instance and returns its
// address, which the instance gets as its only seed broker (KAFKA_BROKERS).
func (t *Tap) Listen(instance string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("group tap: listen for %s: %w", instance, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		l.Close()
		return "", errors.New("group tap: closed")
	}
	t.listeners = append(t.listeners, l)
	t.wg.Go(func() { t.accept(l, instance) })
	return l.Addr().String(), nil
}

// BeforeNextRecords runs fn once, in the tap, just before the next Fetch answer that
// carries records is passed to instance: a process frozen by fn wakes up with a batch
// in its socket, delivered by a generation that has ended meanwhile.
func (t *Tap) BeforeNextRecords(instance string, fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.beforeRecords[instance] = fn
}

// History returns a copy of what the tap has recorded so far.
func (t *Tap) History() History {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.history.clone()
}

// Close stops every listener and connection and waits for their goroutines.
func (t *Tap) Close() {
	t.mu.Lock()
	t.closed = true
	for _, l := range t.listeners {
		l.Close()
	}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// accept serves one instance's listener until it is closed.
func (t *Tap) accept(l net.Listener, instance string) {
	for {
		client, err := l.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.DialTimeout("tcp", t.upstream, 5*time.Second)
		if err != nil {
			t.logger.Warn("dial the broker", slog.String("instance", instance), slog.Any("err", err))
			client.Close()
			continue
		}
		if !t.track(client, server) {
			return
		}
		c := &tapConn{tap: t, instance: instance, listenAddr: l.Addr().String(), client: client, server: server, pending: map[int32]pendingRequest{}}
		t.wg.Go(c.forwardRequests)
		t.wg.Go(c.forwardResponses)
	}
}

// track registers a connection pair for Close; false if the tap is already closed.
func (t *Tap) track(conns ...net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		t.conns[c] = struct{}{}
	}
	return true
}

// untrack closes a connection pair and forgets it.
func (t *Tap) untrack(conns ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(t.conns, c)
	}
}

// since is the time elapsed since the run's origin, in seconds.
func (t *Tap) since() float64 { return time.Since(t.origin).Seconds() }

// tapConn is one client connection and its upstream twin. Requests and answers travel
// in order on one connection, and an answer names its request by correlation id.
type tapConn struct {
	tap        *Tap
	instance   string
	listenAddr string
	client     net.Conn
	server     net.Conn

	mu      sync.Mutex
	pending map[int32]pendingRequest
}

// forwardRequests copies the client's requests to the broker, noting each one's key
// and version (its answer is read by them) and decoding the few the tap records.
func (c *tapConn) forwardRequests() {
	defer c.tap.untrack(c.client, c.server)
	for {
		frame, err := readFrame(c.client)
		if err != nil {
			return
		}
		if req, err := parseRequest(frame); err == nil {
			req.sentAtS = c.tap.since()
			c.mu.Lock()
			c.pending[req.correlationID] = req
			c.mu.Unlock()
		}
		if _, err := c.server.Write(frame); err != nil {
			return
		}
	}
}

// forwardResponses copies the broker's answers to the client, rewriting the broker
// addresses and recording the group protocol on the way.
func (c *tapConn) forwardResponses() {
	defer c.tap.untrack(c.client, c.server)
	for {
		frame, err := readFrame(c.server)
		if err != nil {
			return
		}
		if len(frame) >= 8 {
			corr := int32(binary.BigEndian.Uint32(frame[4:8]))
			c.mu.Lock()
			req, ok := c.pending[corr]
			delete(c.pending, corr)
			c.mu.Unlock()
			if ok {
				frame = c.tap.answered(c, req, frame)
			}
		}
		if _, err := c.client.Write(frame); err != nil {
			return
		}
	}
}

// advertised is the listener's host and port, which replace the broker's own.
func (c *tapConn) advertised() (string, int32) {
	host, port, _ := net.SplitHostPort(c.listenAddr)
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

// maxFrame bounds one request or answer; a Fetch answer is at most fetch.max.bytes
// (50 MiB by default) plus its framing.
const maxFrame = 128 << 20

// readFrame reads one size-prefixed Kafka frame, size included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}
