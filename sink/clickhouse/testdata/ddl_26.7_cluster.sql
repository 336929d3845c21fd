CREATE DATABASE IF NOT EXISTS replaywatch ON CLUSTER rw;

CREATE TABLE IF NOT EXISTS replaywatch.schema_migrations ON CLUSTER rw (
    version UInt32,
    name String,
    applied_at DateTime DEFAULT now(),
    replaywatch String
) ENGINE = MergeTree ORDER BY version;

CREATE TABLE IF NOT EXISTS replaywatch.violations_local ON CLUSTER rw (
    id String,
    kind LowCardinality(String),
    severity LowCardinality(String),
    time DateTime64(9, 'UTC'),
    session_id String,
    new_session_id String,
    last_event_id String,
    first_event_id String,
    stream_id String,
    protocol_version LowCardinality(String),
    client String,
    server LowCardinality(String),
    jsonrpc_ids Array(String),
    tool LowCardinality(String),
    explanation String,
    evidence String,
    confidence LowCardinality(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/violations_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (kind, session_id, id)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.violations ON CLUSTER rw AS replaywatch.violations_local
ENGINE = Distributed(rw, replaywatch, violations_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.resumes_local ON CLUSTER rw (
    id String,
    time DateTime64(9, 'UTC'),
    session_id String,
    response_session_id String,
    last_event_id String,
    first_event_id String,
    stream_id String,
    status UInt16,
    outcome LowCardinality(String),
    reason String,
    protocol_version LowCardinality(String),
    client String,
    server LowCardinality(String),
    replayed UInt32,
    violation_ids Array(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/resumes_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.resumes ON CLUSTER rw AS replaywatch.resumes_local
ENGINE = Distributed(rw, replaywatch, resumes_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.sessions_local ON CLUSTER rw (
    session_id String,
    server LowCardinality(String),
    client String,
    protocol_version LowCardinality(String),
    first_seen DateTime64(9, 'UTC'),
    last_seen DateTime64(9, 'UTC'),
    start_seen UInt8,
    requests UInt32,
    events UInt32,
    streams UInt32,
    resumes UInt32,
    violations UInt32,
    ended LowCardinality(String),
    previous_session_id String,
    link_confidence LowCardinality(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/sessions_local', '{replica}', last_seen)
PARTITION BY toYYYYMMDD(first_seen)
ORDER BY (session_id, server)
TTL toDateTime(last_seen) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.sessions ON CLUSTER rw AS replaywatch.sessions_local
ENGINE = Distributed(rw, replaywatch, sessions_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.unknown_outcomes_local ON CLUSTER rw (
    id String,
    time DateTime64(9, 'UTC'),
    session_id String,
    jsonrpc_id String,
    method LowCardinality(String),
    tool LowCardinality(String),
    arguments_hash String,
    called_at DateTime64(9, 'UTC'),
    client String,
    server LowCardinality(String),
    reason String,
    reissued_in_session String,
    arguments String,
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/unknown_outcomes_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.unknown_outcomes ON CLUSTER rw AS replaywatch.unknown_outcomes_local
ENGINE = Distributed(rw, replaywatch, unknown_outcomes_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.unverifiable_local ON CLUSTER rw (
    id String,
    time DateTime64(9, 'UTC'),
    session_id String,
    client String,
    server LowCardinality(String),
    reason String,
    check_name LowCardinality(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/unverifiable_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.unverifiable ON CLUSTER rw AS replaywatch.unverifiable_local
ENGINE = Distributed(rw, replaywatch, unverifiable_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.stream_events_local ON CLUSTER rw (
    id String,
    time DateTime64(9, 'UTC'),
    session_id String,
    stream_id String,
    event_id String,
    position Int32,
    delivery UInt16,
    resumed UInt8,
    priming UInt8,
    method LowCardinality(String),
    jsonrpc_id String,
    messages UInt16,
    data_bytes UInt32,
    data_hash String,
    client String,
    server LowCardinality(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/stream_events_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS replaywatch.stream_events ON CLUSTER rw AS replaywatch.stream_events_local
ENGINE = Distributed(rw, replaywatch, stream_events_local, sipHash64(session_id));
