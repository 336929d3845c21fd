import {
  AnnotationEvent,
  AnnotationQuery,
  CoreApp,
  DataFrame,
  DataSourceInstanceSettings,
  Field,
  ScopedVars,
  TimeRange,
} from '@grafana/data';
import { DataSourceWithBackend, getTemplateSrv } from '@grafana/runtime';
import { of } from 'rxjs';

import { DEFAULT_QUERY, ReplaywatchOptions, ReplaywatchQuery, SessionSummary } from './types';

/** The query fields in which template variables are replaced. */
const TEMPLATED_FIELDS = ['session', 'kind', 'severity', 'server', 'client'] as const;

export class DataSource extends DataSourceWithBackend<ReplaywatchQuery, ReplaywatchOptions> {
  constructor(instanceSettings: DataSourceInstanceSettings<ReplaywatchOptions>) {
    super(instanceSettings);
    // Any query can be an annotation query: a story gives its own
    // annotations frame (epochs, findings, resumes that did not resume),
    // findings give one marker each; resume health gives none.
    this.annotations = {
      getDefaultQuery: () => ({ queryType: 'findings' }),
      prepareQuery: (anno: AnnotationQuery<ReplaywatchQuery>) => annotationQuery(anno.target),
      processEvents: (_anno: AnnotationQuery<ReplaywatchQuery>, frames: DataFrame[]) => of(toAnnotations(frames)),
    };
  }

  getDefaultQuery(_: CoreApp): Partial<ReplaywatchQuery> {
    return DEFAULT_QUERY;
  }

  /** A story without a session is not sent: the backend would refuse it. */
  filterQuery(query: ReplaywatchQuery): boolean {
    if ((query.queryType ?? 'story') === 'story') {
      return !!query.session?.trim();
    }
    return true;
  }

  applyTemplateVariables(query: ReplaywatchQuery, scopedVars: ScopedVars): ReplaywatchQuery {
    const srv = getTemplateSrv();
    const out: ReplaywatchQuery = { ...query };
    for (const name of TEMPLATED_FIELDS) {
      const v = query[name];
      if (v) {
        out[name] = srv.replace(v, scopedVars).trim();
      }
    }
    return out;
  }

  /**
   * The sessions of a time range whose id starts with prefix, newest
   * first (the backend's GET sessions resource; at most 200).
   */
  searchSessions(prefix: string, range?: TimeRange, onlyWithViolations = false): Promise<SessionSummary[]> {
    const params: Record<string, string | number> = { q: prefix.trim() };
    if (range) {
      params.from = range.from.valueOf();
      params.to = range.to.valueOf();
    }
    if (onlyWithViolations) {
      params.violations = 1;
    }
    return this.getResource<SessionSummary[]>('sessions', params);
  }
}

/**
 * The query an annotation runs: a story asks for its annotations part only,
 * which the backend sends unmarked, as data (Grafana 10.4 to 11.2 hand
 * processEvents the data frames only); other queries as they are.
 */
export function annotationQuery(target?: ReplaywatchQuery): ReplaywatchQuery | undefined {
  if (!target) {
    return undefined;
  }
  if ((target.queryType || 'story') === 'story') {
    return { ...target, part: 'annotations' };
  }
  return target;
}

function fieldOf(frame: DataFrame, name: string): Field | undefined {
  return frame.fields.find((f) => f.name === name);
}

function valueAt(field: Field | undefined, i: number): string {
  const v = field?.values[i];
  return v === undefined || v === null ? '' : String(v);
}

/**
 * Annotation events from a query's frames, picked by name (Grafana may mark
 * every frame it hands over as annotations): a story's frame `annotations`,
 * else one event per row of `findings`; none from other frames.
 */
export function toAnnotations(frames: DataFrame[]): AnnotationEvent[] {
  const marked = frames.find((f) => f.name === 'annotations');
  if (marked) {
    const time = fieldOf(marked, 'time');
    const title = fieldOf(marked, 'title');
    const text = fieldOf(marked, 'text');
    const tags = fieldOf(marked, 'tags');
    return Array.from({ length: marked.length }, (_, i) => ({
      time: Number(time?.values[i]),
      title: valueAt(title, i),
      text: valueAt(text, i),
      tags: valueAt(tags, i) ? [valueAt(tags, i)] : [],
    }));
  }
  const findings = frames.find((f) => f.name === 'findings');
  if (!findings) {
    return [];
  }
  const time = fieldOf(findings, 'time');
  const severity = fieldOf(findings, 'severity');
  const kind = fieldOf(findings, 'kind');
  const session = fieldOf(findings, 'session');
  const explanation = fieldOf(findings, 'explanation');
  return Array.from({ length: findings.length }, (_, i) => ({
    time: Number(time?.values[i]),
    title: `${valueAt(severity, i)} ${valueAt(kind, i)}`,
    text: [valueAt(session, i) && `session ${valueAt(session, i)}`, valueAt(explanation, i)].filter(Boolean).join(': '),
    tags: ['finding', valueAt(kind, i), valueAt(severity, i)].filter(Boolean),
  }));
}
