#!/bin/sh
# Run once by the postgres service's first start (docker-entrypoint-initdb.d): lets
# the postgres-standby service (profile "standby") stream from this server. The
# image's own rule, "host all all all", does not cover replication connections.
echo "host replication all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
