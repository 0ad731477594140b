# Sourced by scripts/peers/debezium/run and .../steady: the shared set-up of a side-by-side sitting.
# Expects the caller to have cd-ed to the repository root. Sets ROOT, HERE, WORK, JARS, PGDATA,
# PGPORT, REST_PORT, BOOTSTRAP, PARTITIONS, HANDOFF_BIN, CONNECT; fetches the jars; starts the
# private Postgres (stopped on exit, with Connect and the topics made here); defines log, die,
# as_pg, sql, fresh_db and topic.
# shellcheck shell=bash
ROOT=$PWD
HERE=$ROOT/scripts/peers/debezium
WORK=$ROOT/target/peers
JARS=$WORK/jars
PGDATA=$WORK/pg
PGPORT=${PEERS_PG_PORT:-55432}
REST_PORT=${PEERS_CONNECT_PORT:-18083}
BOOTSTRAP=127.0.0.1:19092
PGBIN=/usr/lib/postgresql/15/bin
PARTITIONS=3
HANDOFF_BIN=${HANDOFF_BIN:-$ROOT/target/release/handoff}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
# connect-standalone.sh's JVM settings (kafka-run-class.sh defaults, its 2 GB heap).
CONNECT_JVM=(-Xms256m -Xmx2g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true -Dlog4j2.configurationFile="$HERE/log4j2.xml")
CONNECT=("$JAVA" "${CONNECT_JVM[@]}" -cp "$JARS/*" org.apache.kafka.connect.cli.ConnectStandalone)

log() { printf 'peers: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- jars: fetched once per pom (a changed pom fetches again), into a side dir first.
if ! cmp -s "$HERE/pom.xml" "$JARS/.pom" 2>/dev/null; then
  log "fetching Kafka Connect and Debezium into $JARS"
  rm -rf "$JARS" "$JARS.partial"
  out=$(mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$JARS.partial" 2>&1) || { printf '%s\n' "$out" >&2; die "mvn failed"; }
  cp "$HERE/pom.xml" "$JARS.partial/.pom"
  mv "$JARS.partial" "$JARS"
fi
[ -x "$HANDOFF_BIN" ] || die "no handoff binary at $HANDOFF_BIN (set HANDOFF_BIN; this script never builds)"
python3 "$ROOT/scripts/kafka/probe.py" "$BOOTSTRAP" >/dev/null || die "no Kafka at $BOOTSTRAP (scripts/services up kafka)"
python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$REST_PORT" 2>/dev/null \
  && die "port $REST_PORT (Connect's REST listener) is taken; set PEERS_CONNECT_PORT"

# --- private Postgres: initdb and postgres refuse root, so run them as user postgres then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; else "$@"; fi
}
mkdir -p "$WORK/logs"
RESULTS=$WORK/results.jsonl
: >"$RESULTS"
TOPICS=()
CONNECT_PID=
cleanup() {
  set +e
  [ -n "$CONNECT_PID" ] && kill -TERM "$CONNECT_PID" 2>/dev/null && wait "$CONNECT_PID" 2>/dev/null
  if [ -z "${PEERS_KEEP:-}" ] && [ ${#TOPICS[@]} -gt 0 ]; then
    for t in "${TOPICS[@]}"; do
      "$ROOT/scripts/kafka-tool" topics --bootstrap-server "$BOOTSTRAP" --delete --topic "$t" >/dev/null 2>&1
    done
  fi
  [ -s "$PGDATA/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
}
trap cleanup EXIT

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  log "initialising a private Postgres in $PGDATA"
  mkdir -p "$PGDATA"
  [ "$(id -u)" = 0 ] && chown postgres "$PGDATA"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust >/dev/null
fi
[ "$(id -u)" = 0 ] && chown -R postgres "$PGDATA"
log "starting Postgres 15 on 127.0.0.1:$PGPORT (wal_level=logical)"
as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w -o \
  "-p $PGPORT -c listen_addresses=127.0.0.1 -k $PGDATA -c wal_level=logical -c max_replication_slots=4 -c max_wal_senders=4" \
  start >/dev/null
sql() { PGOPTIONS='-c client_min_messages=warning' psql -h 127.0.0.1 -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1 -qtAX "$@"; }

# fresh_db NAME: drops it (and a slot left in it) and creates it empty.
fresh_db() {
  sql -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$1'" >/dev/null
  sql -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
}

# topic NAME [PARTITIONS] [--config K=V...]: created here (the broker would auto-create one
# partition), kept an hour.
topic() {
  local name=$1 partitions=${2:-$PARTITIONS}
  shift $(($# < 2 ? $# : 2))
  "$ROOT/scripts/kafka-tool" topics --bootstrap-server "$BOOTSTRAP" --create --topic "$name" \
    --partitions "$partitions" --replication-factor 1 --config retention.ms=3600000 "$@" >/dev/null
  TOPICS+=("$name")
}
