CREATE DATABASE IF NOT EXISTS replaywatch ON CLUSTER rw;

CREATE TABLE IF NOT EXISTS replaywatch.schema_migrations ON CLUSTER rw (
    version UInt32,
    name String,
    applied_at DateTime DEFAULT now(),
    replaywatch String
) ENGINE = MergeTree ORDER BY version;

CREATE TABLE IF NOT EXISTS replaywatch.violations_local ON CLUSTER rw (
    id String,
    kind String,
    severity String,
    time DateTime('UTC'),
    session_id String,
    new_session_id String,
    last_event_id String,
    first_event_id String,
    stream_id String,
    protocol_version String,
    client String,
    server String,
    jsonrpc_ids Array(String),
    tool String,
    explanation String,
    evidence String,
    confidence String,
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/violations_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (kind, session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.violations ON CLUSTER rw AS replaywatch.violations_local
ENGINE = Distributed(rw, replaywatch, violations_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.resumes_local ON CLUSTER rw (
    id String,
    time DateTime('UTC'),
    session_id String,
    response_session_id String,
    last_event_id String,
    first_event_id String,
    stream_id String,
    status UInt16,
    outcome String,
    reason String,
    protocol_version String,
    client String,
    server String,
    replayed UInt32,
    violation_ids Array(String),
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/resumes_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.resumes ON CLUSTER rw AS replaywatch.resumes_local
ENGINE = Distributed(rw, replaywatch, resumes_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.sessions_local ON CLUSTER rw (
    session_id String,
    server String,
    client String,
    protocol_version String,
    first_seen DateTime('UTC'),
    last_seen DateTime('UTC'),
    start_seen UInt8,
    requests UInt32,
    events UInt32,
    streams UInt32,
    resumes UInt32,
    violations UInt32,
    ended String,
    previous_session_id String,
    link_confidence String,
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/sessions_local', '{replica}', last_seen)
PARTITION BY toYYYYMMDD(first_seen)
ORDER BY (session_id, server);

CREATE TABLE IF NOT EXISTS replaywatch.sessions ON CLUSTER rw AS replaywatch.sessions_local
ENGINE = Distributed(rw, replaywatch, sessions_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.unknown_outcomes_local ON CLUSTER rw (
    id String,
    time DateTime('UTC'),
    session_id String,
    jsonrpc_id String,
    method String,
    tool String,
    arguments_hash String,
    called_at DateTime('UTC'),
    client String,
    server String,
    reason String,
    reissued_in_session String,
    arguments String,
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/unknown_outcomes_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.unknown_outcomes ON CLUSTER rw AS replaywatch.unknown_outcomes_local
ENGINE = Distributed(rw, replaywatch, unknown_outcomes_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.unverifiable_local ON CLUSTER rw (
    id String,
    time DateTime('UTC'),
    session_id String,
    client String,
    server String,
    reason String,
    check_name String,
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/unverifiable_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.unverifiable ON CLUSTER rw AS replaywatch.unverifiable_local
ENGINE = Distributed(rw, replaywatch, unverifiable_local, sipHash64(session_id));

CREATE TABLE IF NOT EXISTS replaywatch.stream_events_local ON CLUSTER rw (
    id String,
    time DateTime('UTC'),
    session_id String,
    stream_id String,
    event_id String,
    position Int32,
    delivery UInt16,
    resumed UInt8,
    priming UInt8,
    method String,
    jsonrpc_id String,
    messages UInt16,
    data_bytes UInt32,
    data_hash String,
    client String,
    server String,
    source_kind String,
    node String,
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/replaywatch/stream_events_local', '{replica}')
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.stream_events ON CLUSTER rw AS replaywatch.stream_events_local
ENGINE = Distributed(rw, replaywatch, stream_events_local, sipHash64(session_id));
