CREATE DATABASE IF NOT EXISTS replaywatch;

CREATE TABLE IF NOT EXISTS replaywatch.schema_migrations (
    version UInt32,
    name String,
    applied_at DateTime DEFAULT now(),
    replaywatch String
) ENGINE = MergeTree ORDER BY version;

CREATE TABLE IF NOT EXISTS replaywatch.violations (
    id String,
    kind LowCardinality(String),
    severity LowCardinality(String),
    time DateTime('UTC'),
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
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (kind, session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.resumes (
    id String,
    time DateTime('UTC'),
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
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.sessions (
    session_id String,
    server LowCardinality(String),
    client String,
    protocol_version LowCardinality(String),
    first_seen DateTime('UTC'),
    last_seen DateTime('UTC'),
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
) ENGINE = ReplacingMergeTree(last_seen)
PARTITION BY toYYYYMMDD(first_seen)
ORDER BY (session_id, server);

CREATE TABLE IF NOT EXISTS replaywatch.unknown_outcomes (
    id String,
    time DateTime('UTC'),
    session_id String,
    jsonrpc_id String,
    method LowCardinality(String),
    tool LowCardinality(String),
    arguments_hash String,
    called_at DateTime('UTC'),
    client String,
    server LowCardinality(String),
    reason String,
    reissued_in_session String,
    arguments String,
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.unverifiable (
    id String,
    time DateTime('UTC'),
    session_id String,
    client String,
    server LowCardinality(String),
    reason String,
    check_name LowCardinality(String),
    source_kind LowCardinality(String),
    node LowCardinality(String),
    source String,
    inserted_at DateTime DEFAULT now()
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);

CREATE TABLE IF NOT EXISTS replaywatch.stream_events (
    id String,
    time DateTime('UTC'),
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
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(time)
ORDER BY (session_id, id);
