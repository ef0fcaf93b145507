#!/bin/sh
# The postgres-standby service's entrypoint (compose profile "standby"), the compose
# form of `PG_NODES=2 scripts/stack/postgres.sh start`: on first start, a base backup of
# the postgres service through the physical slot "standby" (-R makes it a standby
# streaming from there, as application_name standby); then the server, with the options
# it is given; then synchronous replication on the primary, so that a commit waits
# until this standby has it. The primary waits for it by name: '*' would match any
# walsender, the CDC relay's logical replication connection too, whose feedback could
# then acknowledge a commit this standby has not got. A clean stop (docker compose stop)
# turns that wait off first, or the primary would stop committing; a crash of this
# container leaves it on, which is what synchronous replication means.
set -eu
export PGPASSWORD="$POSTGRES_PASSWORD"
primary() { psql -h postgres -U postgres -d postgres -Atq "$@"; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	until pg_isready -q -h postgres -U postgres; do sleep 1; done
	primary -c "SELECT pg_create_physical_replication_slot('standby') WHERE NOT EXISTS
		(SELECT 1 FROM pg_replication_slots WHERE slot_name = 'standby')"
	pg_basebackup -h postgres -U postgres -d application_name=standby -D "$PGDATA" -X stream -S standby -R -c fast
	chmod 700 "$PGDATA"
fi

postgres "$@" &
server=$!
stop() {
	primary -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" || true
	kill -TERM "$server"
}
trap stop TERM INT
until pg_isready -q -h 127.0.0.1 -U postgres; do sleep 1; done
primary -c "ALTER SYSTEM SET synchronous_standby_names = '\"standby\"'" -c "SELECT pg_reload_conf()"
wait "$server" || wait "$server"
