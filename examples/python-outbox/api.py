"""The payments API and its outbox relay, written from docs/contract.md alone.

POST /payments writes the payment and its outbox row in one PostgreSQL transaction and
never talks to Kafka; the relay (relay.py), a thread of this process, publishes the rows.

    DATABASE_URL=... KAFKA_BROKERS=127.0.0.1:29092 KAFKA_TOPIC=... HTTP_ADDR=127.0.0.1:9090 \
        python api.py [migrate]
"""

import json
import logging
import os
import re
import signal
import sys
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import psycopg_pool

from relay import Relay

log = logging.getLogger("api")

MAX_BODY = 4096
MAX_AMOUNT = 2**63 - 1
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# 1 to 64 (user ids) or 255 (Idempotency-Key) visible ASCII characters, 0x21 to 0x7E.
VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")


def load_currencies(openapi_path):
    """The accepted codes: the currency enum of docs/openapi.yaml, the contract's list."""
    text = Path(openapi_path).read_text()
    match = re.search(r"enum: \[\s*(AED[^\]]*)\]", text)
    if not match:
        raise SystemExit(f"no currency enum in {openapi_path}: set OPENAPI_PATH to docs/openapi.yaml")
    return frozenset(re.findall(r"[A-Z]{3}", match.group(1)))


class APIError(Exception):
    STATUS = {"invalid": 400, "not_found": 404, "unprocessable": 422, "too_large": 413,
              "unsupported_media_type": 415, "unavailable": 503, "internal": 500}

    def __init__(self, code, message, field=None):
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


def rfc3339(ts):
    """RFC 3339 in UTC with up to microsecond precision, trailing zeros dropped."""
    text = ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def validate(body, currencies):
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError("invalid", f"malformed JSON: {e}")
    if not isinstance(req, dict):
        raise APIError("invalid", "the body must be one JSON object")
    for name in req:
        if name not in ("user_id", "amount", "currency"):
            raise APIError("invalid", f"unknown field {name}", name)
    user_id, amount, currency = req.get("user_id"), req.get("amount"), req.get("currency")
    if not isinstance(user_id, str) or not 1 <= len(user_id) <= 64 or not VISIBLE_ASCII.match(user_id):
        raise APIError("invalid", "user_id must be 1 to 64 visible ASCII characters", "user_id")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_AMOUNT:
        raise APIError("invalid", "amount must be a positive integer in minor units", "amount")
    if not isinstance(currency, str) or currency not in currencies:
        raise APIError("invalid", "currency must be an active ISO 4217 code in upper case", "currency")
    return user_id, amount, currency


def create_payment(pool, key, user_id, amount, currency):
    """Returns (payment dict, replayed). One transaction: payment, key, outbox row."""
    with pool.connection() as conn, conn.transaction():
        if key is not None:
            # ON CONFLICT waits for a concurrent request with the same key to commit.
            row = conn.execute(
                "SELECT user_id, amount, currency, payment_id FROM idempotency_keys WHERE key = %s",
                (key,)).fetchone()
            if row is not None:
                return replay(conn, row, user_id, amount, currency), True
        payment_id, event_id = uuid.uuid4(), uuid.uuid4()
        created_at = datetime.now(timezone.utc)
        conn.execute("INSERT INTO payments (id, user_id, amount, currency, created_at) VALUES (%s, %s, %s, %s, %s)",
                     (payment_id, user_id, amount, currency, created_at))
        if key is not None:
            inserted = conn.execute(
                "INSERT INTO idempotency_keys (key, user_id, amount, currency, payment_id) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (key) DO NOTHING", (key, user_id, amount, currency, payment_id)).rowcount
            if not inserted:
                raise RetryReplay()
        payload = json.dumps({"payment_id": str(payment_id), "user_id": user_id, "amount": amount,
                              "currency": currency, "created_at": rfc3339(created_at)})
        conn.execute("INSERT INTO outbox_events (id, aggregate_id, event_type, payload, occurred_at)"
                     " VALUES (%s, %s, 'PaymentCreated', %s, %s)",
                     (event_id, str(payment_id), payload, rfc3339(created_at)))
        conn.execute("NOTIFY outbox_events")
    return {"id": str(payment_id), "user_id": user_id, "amount": amount, "currency": currency,
            "created_at": rfc3339(created_at), "event_id": str(event_id)}, False


class RetryReplay(Exception):
    """A concurrent request with the same key committed first: answer with its payment."""


def replay(conn, key_row, user_id, amount, currency):
    if tuple(key_row[:3]) != (user_id, amount, currency):
        raise APIError("unprocessable", "this Idempotency-Key was used with a different request", "Idempotency-Key")
    row = conn.execute("""
        SELECT p.id, p.user_id, p.amount, p.currency, p.created_at, o.id
        FROM payments p LEFT JOIN outbox_events o ON o.aggregate_id = p.id::text
        WHERE p.id = %s""", (key_row[3],)).fetchone()
    payment = {"id": str(row[0]), "user_id": row[1], "amount": row[2], "currency": row[3],
               "created_at": rfc3339(row[4])}
    if row[5] is not None:
        payment["event_id"] = str(row[5])
    return payment


def get_payment(pool, payment_id):
    with pool.connection() as conn:
        row = conn.execute("""
            SELECT p.id, p.user_id, p.amount, p.currency, p.created_at,
                   o.id, o.status, o.attempts, o.published_at, o.last_error
            FROM payments p LEFT JOIN outbox_events o ON o.aggregate_id = p.id::text
            WHERE p.id = %s""", (payment_id,)).fetchone()
    if row is None:
        raise APIError("not_found", "no such payment", "id")
    payment = {"id": str(row[0]), "user_id": row[1], "amount": row[2], "currency": row[3],
               "created_at": rfc3339(row[4])}
    if row[5] is not None:
        payment["event"] = {"id": str(row[5]), "status": row[6], "attempts": row[7],
                            "published_at": rfc3339(row[8]) if row[8] else None, "last_error": row[9]}
    return payment


def make_handler(pool, relay, currencies):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the access log is noise here
            pass

        def send_json(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def send_error_json(self, err):
            body = {"code": err.code, "message": err.message}
            if err.field:
                body["field"] = err.field
            headers = [("Retry-After", "2")] if err.code == "unavailable" else []
            self.send_json(APIError.STATUS[err.code], {"error": body}, headers)

        def serve(self, fn):
            try:
                fn()
            except APIError as err:
                self.send_error_json(err)
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as err:
                log.warning("database unavailable: %s", err)
                self.send_error_json(APIError("unavailable", "the payments database cannot be reached, retry"))
            except Exception:
                log.exception("internal error")
                self.send_error_json(APIError("internal", "internal error"))

        def method_not_allowed(self, allow):
            self.send_response(405)
            self.send_header("Allow", allow)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                return self.send_json(200, {"status": "ok"})
            if path == "/readyz":
                return self.serve(self.readyz)
            if path == "/metrics":
                return self.metrics()
            if path.startswith("/payments/") and path.count("/") == 2:
                payment_id = path[len("/payments/"):]
                if not UUID_RE.match(payment_id):
                    return self.send_error_json(APIError("invalid", "the payment id must be a UUID", "id"))
                return self.serve(lambda: self.send_json(200, get_payment(pool, payment_id)))
            if path == "/payments":
                return self.method_not_allowed("POST")
            self.send_error_json(APIError("not_found", f"no such endpoint: GET {path}"))

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if path == "/payments":
                return self.serve(self.create)
            if path.startswith("/payments/") or path in ("/healthz", "/readyz", "/metrics"):
                return self.method_not_allowed("GET")
            self.send_error_json(APIError("not_found", f"no such endpoint: POST {path}"))

        def other_method(self):
            path = self.path.split("?", 1)[0]
            if path == "/payments":
                return self.method_not_allowed("POST")
            if path.startswith("/payments/") or path in ("/healthz", "/readyz", "/metrics"):
                return self.method_not_allowed("GET")
            self.send_error_json(APIError("not_found", f"no such endpoint: {self.command} {path}"))

        do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = other_method

        def readyz(self):
            with pool.connection(timeout=2) as conn:
                conn.execute("SELECT 1")
            self.send_json(200, {"status": "ready"})

        def metrics(self):
            data = relay.metrics_text(pool).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def create(self):
            media_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if media_type != "application/json":
                raise APIError("unsupported_media_type", "send the body as JSON with Content-Type: application/json", "Content-Type")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.close_connection = True  # the body is not read
                raise APIError("too_large", f"the body is over {MAX_BODY} bytes")
            body = self.rfile.read(length)
            key = self.headers.get("Idempotency-Key")
            if key is not None and (len(key) > 255 or not VISIBLE_ASCII.match(key)):
                raise APIError("invalid", "Idempotency-Key must be 1 to 255 visible ASCII characters", "Idempotency-Key")
            user_id, amount, currency = validate(body, currencies)
            try:
                payment, replayed = create_payment(pool, key, user_id, amount, currency)
            except RetryReplay:
                payment, replayed = create_payment(pool, key, user_id, amount, currency)
            headers = [("Location", "/payments/" + payment["id"])]
            if replayed:
                headers.append(("Idempotent-Replayed", "true"))
            else:
                relay.nudge()
            self.send_json(201, payment, headers)

    return Handler


def migrate(database_url):
    sql = (Path(__file__).parent / "migrations" / "payments.sql").read_text()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql)


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    database_url = os.environ["DATABASE_URL"]
    if sys.argv[1:] == ["migrate"]:
        return migrate(database_url)
    host, _, port = os.environ.get("HTTP_ADDR", "127.0.0.1:9090").rpartition(":")
    openapi = os.environ.get("OPENAPI_PATH", str(Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"))
    currencies = load_currencies(openapi)

    pool = psycopg_pool.ConnectionPool(database_url, min_size=2, max_size=10, timeout=5, open=True)
    relay = Relay(pool, brokers=os.environ.get("KAFKA_BROKERS", "127.0.0.1:19092"),
                  topic=os.environ.get("KAFKA_TOPIC", "payments.events"))
    server = ThreadingHTTPServer((host, int(port)), make_handler(pool, relay, currencies))
    relay_thread = threading.Thread(target=relay.run, name="relay")
    relay_thread.start()

    def stop(signum, frame):
        threading.Thread(target=server.shutdown).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("listening on %s:%s", host, port)
    server.serve_forever()
    # Ordered shutdown: no new payments, then the relay finishes its batch, then the pool.
    server.server_close()
    relay.stop()
    relay_thread.join()
    pool.close()


if __name__ == "__main__":
    main()
