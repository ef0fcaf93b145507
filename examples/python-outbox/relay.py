"""The outbox relay: claims pending rows with SKIP LOCKED, publishes them, records outcomes.

The Kafka producer keeps every timeout at the client's default (librdkafka: a record is
retried inside the client for up to message.timeout.ms = 300 s). That is deliberate: the
contract must hold for a correct relay whatever its client's timeouts are.
"""

import logging
import threading
import time
import uuid

from confluent_kafka import KafkaError, KafkaException, Producer

log = logging.getLogger("relay")

BATCH_SIZE = 500
# A claimed row belongs to this relay for LEASE_SECONDS. It must outlive one publish,
# and with default timeouts a publish may take the client's full 300 s.
LEASE_SECONDS = 360
MAX_REJECTIONS = 5
# At stop, how long the batch in flight may still finish before its leases are released.
SHUTDOWN_GRACE_SECONDS = 10

TRANSPORT_ERRORS = {KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                    KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE, KafkaError.REQUEST_TIMED_OUT,
                    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_LEADER_FOR_PARTITION}


class Relay:
    def __init__(self, pool, brokers, topic):
        self.pool, self.brokers, self.topic = pool, brokers, topic
        self.producer = self.new_producer()
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.failures = {"transport": 0, "rejected": 0}
        self.published = 0

    def new_producer(self):
        # Idempotent (hence acks=all): the client's own retries never duplicate a record.
        return Producer({"bootstrap.servers": self.brokers, "enable.idempotence": True})

    def nudge(self):
        self.wake.set()

    def stop(self):
        self.stopping.set()
        self.wake.set()

    def run(self):
        backoff = 0.0
        while not self.stopping.is_set():
            try:
                claimed, transport_failed = self.run_once()
            except Exception:
                log.exception("relay batch")
                claimed, transport_failed = 0, True
            if transport_failed:
                backoff = min(max(backoff * 2, 0.1), 10.0)
                self.stopping.wait(backoff)
            elif claimed == 0:
                backoff = 0.0
                self.wake.wait(1.0)
                self.wake.clear()
            else:
                backoff = 0.0
        self.producer.flush(SHUTDOWN_GRACE_SECONDS)

    def claim(self, token):
        with self.pool.connection() as conn:
            rows = conn.execute("""
                UPDATE outbox_events SET lease_token = %s, lease_expires_at = now() + %s * interval '1 second'
                WHERE id IN (
                    SELECT id FROM outbox_events
                    WHERE status = 'pending' AND (lease_expires_at IS NULL OR lease_expires_at < now())
                    ORDER BY seq LIMIT %s
                    FOR UPDATE SKIP LOCKED)
                RETURNING seq, id, aggregate_id, event_type, payload, occurred_at""",
                (token, LEASE_SECONDS, BATCH_SIZE)).fetchall()
        return sorted(rows)

    def run_once(self):
        """Publishes one batch outside any transaction. Returns (rows, transport failed)."""
        token = uuid.uuid4()
        rows = self.claim(token)
        if not rows:
            return 0, False
        outcomes = {}

        def delivered(err, msg, event_id):
            outcomes[event_id] = err

        sent = 0
        try:
            for _seq, event_id, key, event_type, payload, occurred_at in rows:
                self.producer.produce(
                    self.topic, key=key.encode(), value=payload.encode(),
                    headers=[("X-Event-Id", str(event_id)), ("X-Event-Type", event_type),
                             ("X-Event-Occurred-At", occurred_at)],
                    on_delivery=lambda err, msg, event_id=event_id: delivered(err, msg, event_id))
                sent += 1
        except (BufferError, KafkaException) as err:
            # The rows not handed to the client count as transport failures below.
            log.warning("produce: %s", err)
        started = time.monotonic()
        while len(outcomes) < sent:
            self.producer.poll(0.5)
            if self.stopping.is_set() and time.monotonic() - started > SHUTDOWN_GRACE_SECONDS:
                break  # abandoned: the rows are released below and published again later
        return len(rows), self.record(token, rows, outcomes)

    def record(self, token, rows, outcomes):
        published = [event_id for event_id, err in outcomes.items() if err is None]
        transport, rejected = [], []
        for _seq, event_id, *_ in rows:
            err = outcomes.get(event_id)
            if event_id not in outcomes or (err is not None and (err.code() in TRANSPORT_ERRORS or err.retriable())):
                transport.append((event_id, str(err) if err else "not delivered (client refused it, or shutdown)"))
            elif err is not None:
                rejected.append((event_id, str(err)))
        if any(err is not None and err.fatal() for err in outcomes.values()):
            log.error("producer fatal error, making a new producer")
            self.producer = self.new_producer()
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("""
                UPDATE outbox_events SET status = 'published', published_at = now(),
                    lease_token = NULL, lease_expires_at = NULL
                WHERE id = ANY(%s) AND lease_token = %s""", (published, token))
            for event_id, error in transport:
                conn.execute("""
                    UPDATE outbox_events SET attempts = attempts + 1, last_error = %s,
                        lease_token = NULL, lease_expires_at = NULL
                    WHERE id = %s AND lease_token = %s""", (error, event_id, token))
            for event_id, error in rejected:
                conn.execute("""
                    UPDATE outbox_events SET attempts = attempts + 1, rejections = rejections + 1,
                        last_error = %s, lease_token = NULL, lease_expires_at = NULL,
                        status = CASE WHEN rejections + 1 >= %s THEN 'failed' ELSE status END
                    WHERE id = %s AND lease_token = %s""", (error, MAX_REJECTIONS, event_id, token))
                conn.execute("""
                    INSERT INTO outbox_dlq (event_id, payload, last_error)
                    SELECT id, payload, last_error FROM outbox_events WHERE id = %s AND status = 'failed'
                    ON CONFLICT (event_id) DO NOTHING""", (event_id,))
        with self.lock:
            self.published += len(published)
            self.failures["transport"] += len(transport)
            self.failures["rejected"] += len(rejected)
        if transport or rejected:
            log.warning("publish failed: %d transport, %d rejected, %d published",
                        len(transport), len(rejected), len(published))
        return bool(transport)

    def metrics_text(self, pool):
        with self.lock:
            failures, published = dict(self.failures), self.published
        lines = ["# TYPE outbox_publish_failures_total counter"]
        lines += [f'outbox_publish_failures_total{{reason="{r}"}} {n}' for r, n in sorted(failures.items())]
        lines += ["# TYPE outbox_published_total counter", f"outbox_published_total {published}"]
        try:
            with pool.connection(timeout=2) as conn:
                pending = conn.execute("SELECT count(*) FROM outbox_events WHERE status = 'pending'").fetchone()[0]
            lines += ["# TYPE outbox_pending_count gauge", f"outbox_pending_count {pending}"]
        except Exception as err:  # the counters are still worth serving
            log.warning("pending count: %s", err)
        return "\n".join(lines) + "\n"
