"""The antifraud consumer, written from docs/contract.md alone.

One poll, one transaction: for each record, the dedup row (processed_events, keyed by
X-Event-Id), the decision and the user's running totals are written together; offsets
are committed to Kafka only after that transaction committed. A redelivered event bumps
its deliveries count and changes nothing else.

    DATABASE_URL=... KAFKA_BROKERS=127.0.0.1:19092 KAFKA_TOPIC=... KAFKA_GROUP=antifraud \
        HTTP_ADDR=127.0.0.1:9091 python consumer.py [migrate]
"""

import json
import logging
import os
import signal
import sys
import threading
import uuid
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, KafkaException, TopicPartition

log = logging.getLogger("consumer")

MAX_POLL_RECORDS = 500
REVIEW_AMOUNT = 100_000
VELOCITY_WINDOW = timedelta(minutes=10)
VELOCITY_REVIEW, VELOCITY_BLOCK = 5, 10
TOTAL_REVIEW_AMOUNT = 1_000_000_000


def parse_event(msg):
    """Returns (event_id, payment dict, occurred_at) or raises ValueError for a poison record."""
    headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
    event_id = str(uuid.UUID(headers["X-Event-Id"]))
    if headers.get("X-Event-Type") != "PaymentCreated":
        raise ValueError(f"unknown event type {headers.get('X-Event-Type')!r}")
    payment = json.loads(msg.value())
    uuid.UUID(payment["payment_id"])
    occurred_at = datetime.fromisoformat(headers["X-Event-Occurred-At"].replace("Z", "+00:00"))
    return event_id, payment, occurred_at


def decide(conn, payment, occurred_at):
    """The rules of the contract: amount, velocity in event time, running total."""
    reasons, decision = [], "approve"
    if payment["amount"] > REVIEW_AMOUNT:
        reasons.append("amount")
        decision = "review"
    recent = conn.execute(
        "SELECT count(*) FROM decisions WHERE user_id = %s AND occurred_at > %s AND occurred_at <= %s",
        (payment["user_id"], occurred_at - VELOCITY_WINDOW, occurred_at)).fetchone()[0] + 1
    if recent > VELOCITY_BLOCK:
        reasons.append("velocity")
        decision = "block"
    elif recent > VELOCITY_REVIEW:
        reasons.append("velocity")
        decision = "block" if decision == "block" else "review"
    total = conn.execute(
        "SELECT amount_total FROM user_totals WHERE user_id = %s AND currency = %s",
        (payment["user_id"], payment["currency"])).fetchone()
    if (total[0] if total else 0) + payment["amount"] > TOTAL_REVIEW_AMOUNT:
        reasons.append("total")
        decision = "block" if decision == "block" else "review"
    return decision, reasons


def process(conn, msg):
    try:
        event_id, payment, occurred_at = parse_event(msg)
    except (KeyError, ValueError, TypeError) as err:
        log.error("poison record at %s/%d/%d skipped: %s", msg.topic(), msg.partition(), msg.offset(), err)
        return
    deliveries = conn.execute("""
        INSERT INTO processed_events (event_id) VALUES (%s)
        ON CONFLICT (event_id) DO UPDATE SET deliveries = processed_events.deliveries + 1
        RETURNING deliveries""", (event_id,)).fetchone()[0]
    if deliveries > 1:
        return  # a redelivery: its effects are already committed
    decision, reasons = decide(conn, payment, occurred_at)
    inserted = conn.execute("""
        INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, reasons, occurred_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (payment_id) DO NOTHING""",
        (payment["payment_id"], event_id, payment["user_id"], payment["amount"], payment["currency"],
         decision, reasons, occurred_at)).rowcount
    if not inserted:
        # The contract promises one event id per payment: a second one is the producer's bug.
        log.error("payment %s already decided under another event id than %s", payment["payment_id"], event_id)
        return
    conn.execute("""
        INSERT INTO user_totals (user_id, currency, payment_count, amount_total) VALUES (%s, %s, 1, %s)
        ON CONFLICT (user_id, currency) DO UPDATE SET
            payment_count = user_totals.payment_count + 1,
            amount_total = user_totals.amount_total + excluded.amount_total""",
        (payment["user_id"], payment["currency"], payment["amount"]))


def run(database_url, consumer, stopping):
    conn = None
    while not stopping.is_set():
        msgs = []
        for msg in consumer.consume(num_messages=MAX_POLL_RECORDS, timeout=1.0):
            if msg.error() is not None:
                log.warning("fetch: %s", msg.error())
            else:
                msgs.append(msg)
        if not msgs:
            continue
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(database_url)
            with conn.transaction():
                for msg in msgs:
                    process(conn, msg)
        except psycopg.Error as err:
            # Nothing was committed: rewind to the batch's first records and poll again.
            log.warning("batch not committed, will be redelivered: %s", err)
            conn = None
            first = {}
            for msg in msgs:
                first.setdefault((msg.topic(), msg.partition()), msg.offset())
            for (topic, partition), offset in first.items():
                consumer.seek(TopicPartition(topic, partition, offset))
            stopping.wait(1.0)
            continue
        # Only now that the effects are committed may the offsets move. A failed commit
        # means a redelivery, which the dedup row absorbs.
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as err:
            log.warning("offset commit: %s", err)
    consumer.close()


class Health(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        status, body = (200, b'{"status":"ok"}') if self.path == "/healthz" else (404, b'{"error":{"code":"not_found","message":"no such endpoint"}}')
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    database_url = os.environ["DATABASE_URL"]
    if sys.argv[1:] == ["migrate"]:
        sql = (Path(__file__).parent / "migrations" / "antifraud.sql").read_text()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql)
        return
    consumer = Consumer({
        "bootstrap.servers": os.environ.get("KAFKA_BROKERS", "127.0.0.1:19092"),
        "group.id": os.environ.get("KAFKA_GROUP", "antifraud"),
        "enable.auto.commit": False,
        # A new group starts at the beginning of the topic: the contract's start position.
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([os.environ.get("KAFKA_TOPIC", "payments.events")])
    host, _, port = os.environ.get("HTTP_ADDR", "127.0.0.1:9091").rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    log.info("consuming; health on %s:%s", host, port)
    run(database_url, consumer, stopping)
    server.shutdown()


if __name__ == "__main__":
    main()
