import { DataQuery, DataSourceJsonData, SelectableValue } from '@grafana/data';

/** The query types the backend answers (pkg/plugin/query.go). */
export type QueryType = 'story' | 'findings' | 'resumeHealth';

export const QueryTypes: Array<SelectableValue<QueryType>> = [
  {
    label: 'Session story',
    value: 'story',
    description: "One session's epochs, transitions, SSE events, resumes, findings and annotations",
  },
  { label: 'Findings', value: 'findings', description: 'Violations of the time range, filtered' },
  {
    label: 'Resume health',
    value: 'resumeHealth',
    description: 'Resumes per outcome and interval: a time series for panels and alert rules',
  },
];

/** The story's frames a query may keep alone (pkg/plugin/query.go StoryParts). */
export type StoryPart = 'timeline' | 'epochs' | 'transitions' | 'events' | 'resumes' | 'findings' | 'annotations';

export const StoryParts: Array<SelectableValue<StoryPart | ''>> = [
  { label: 'All frames', value: '' },
  { label: 'Epoch timeline', value: 'timeline', description: 'The session id over time: for a state timeline panel' },
  { label: 'Epochs', value: 'epochs' },
  { label: 'Transitions', value: 'transitions', description: 'Session id changes and their cause' },
  { label: 'Events', value: 'events', description: 'SSE events by stream' },
  { label: 'Resumes', value: 'resumes' },
  { label: 'Findings', value: 'findings' },
  { label: 'Annotations', value: 'annotations' },
];

/**
 * A query as the editor saves it: the backend's Model (pkg/plugin/query.go),
 * field for field. Empty strings mean "no filter"; limit 0 or absent means
 * the data source's max rows.
 */
export interface ReplaywatchQuery extends DataQuery {
  queryType?: QueryType;
  /** story: the session id (template variables allowed). */
  session?: string;
  /** story: one frame only (StoryParts), for a panel that draws one; empty: all. */
  part?: StoryPart | '';
  /** findings: filters (template variables allowed). */
  kind?: string;
  severity?: string;
  /** findings and resumeHealth: the MCP server (host:port as the agent records it). */
  server?: string;
  /** findings: the MCP client (ip:port). */
  client?: string;
  /** Lowers the data source's max rows for this query. */
  limit?: number;
}

export const DEFAULT_QUERY: Partial<ReplaywatchQuery> = {
  queryType: 'findings',
};

/** The data source's jsonData (pkg/plugin/settings.go Settings). */
export interface ReplaywatchOptions extends DataSourceJsonData {
  /** host:port of ClickHouse's native protocol, e.g. clickhouse:9000. */
  address?: string;
  /** Database the agents write (default replaywatch). */
  database?: string;
  user?: string;
  /** Rows one query reads per frame (default 10000, at most 1000000). */
  maxRows?: number;
  /** Longest time range one query may read (default 31, at most 36500). */
  maxRangeDays?: number;
}

/** secureJsonData: sent to the backend only, never read back. */
export interface ReplaywatchSecureJsonData {
  password?: string;
}

/** One entry of the sessions resource (pkg/plugin/resource.go Session). */
export interface SessionSummary {
  session_id: string;
  server: string;
  client: string;
  /** RFC 3339 times. */
  first_seen: string;
  last_seen: string;
  ended: string;
  violations: number;
}

/** Defaults the backend applies (pkg/plugin/settings.go). */
export const DEFAULT_DATABASE = 'replaywatch';
export const DEFAULT_MAX_ROWS = 10000;
export const HARD_MAX_ROWS = 1000000;
export const DEFAULT_MAX_RANGE_DAYS = 31;
export const HARD_MAX_RANGE_DAYS = 36500;

/**
 * Finding kinds and severities as the detector writes them
 * (detector/records.go, docs/catalogue.md). The editor offers these and
 * accepts any other value (a template variable, a kind added later).
 */
export const KINDS = [
  'session_swap',
  'replayed_event',
  'cross_stream_replay',
  'duplicate_delivery',
  'unknown_last_event_id_accepted',
  'event_id_reset',
  'truncated_resume',
  'silent_reinit_after_404',
  'incomplete_replay',
  'unresumable_close',
  'progress_replay',
  'resume_on_sessionless_revision',
  'reissued_call_after_break',
  'unknown_session_not_404',
  'cursor_dropped',
];

export const SEVERITIES = ['critical', 'high', 'medium'];
