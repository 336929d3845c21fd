import React, { ChangeEvent, useCallback, useState } from 'react';
import { QueryEditorProps, SelectableValue } from '@grafana/data';
import { getTemplateSrv } from '@grafana/runtime';
// Select and AsyncSelect rather than Combobox: Combobox is not in the
// Grafana versions before 11 that plugin.json still admits (>=10.4.0).
import { AsyncSelect, InlineField, InlineFieldRow, InlineSwitch, Input, RadioButtonGroup, Select } from '@grafana/ui';

import { DataSource } from '../datasource';
import {
  KINDS,
  QueryType,
  QueryTypes,
  ReplaywatchOptions,
  ReplaywatchQuery,
  SEVERITIES,
  SessionSummary,
  StoryPart,
  StoryParts,
} from '../types';

type Props = QueryEditorProps<DataSource, ReplaywatchQuery, ReplaywatchOptions>;

const LABEL_WIDTH = 14;

const asOption = (v: string): SelectableValue<string> => ({ label: v, value: v });
const kindOptions = KINDS.map(asOption);
const severityOptions = SEVERITIES.map(asOption);

/** The dashboard's template variables as $name options, those matching the typed text. */
function variableOptions(typed: string): Array<SelectableValue<string>> {
  return getTemplateSrv()
    .getVariables()
    .map((v) => `$${v.name}`)
    .filter((name) => name.startsWith(typed) || typed === '')
    .map((name) => ({ label: name, value: name, description: 'template variable' }));
}

function describeSession(s: SessionSummary): string {
  const parts = [`${s.client || '?'} → ${s.server || '?'}`, `last seen ${s.last_seen}`];
  if (s.ended) {
    parts.push(`ended: ${s.ended}`);
  }
  parts.push(s.violations === 1 ? '1 violation' : `${s.violations} violations`);
  return parts.join(' · ');
}

export function QueryEditor({ query, onChange, onRunQuery, datasource, range }: Props) {
  const queryType: QueryType = query.queryType ?? 'story';
  const [onlyViolations, setOnlyViolations] = useState(false);
  const [searchError, setSearchError] = useState<string | undefined>();

  const change = (patch: Partial<ReplaywatchQuery>, run = false) => {
    onChange({ ...query, ...patch });
    if (run) {
      onRunQuery();
    }
  };

  const text =
    (key: 'server' | 'client') =>
    (e: ChangeEvent<HTMLInputElement>): void =>
      change({ [key]: e.currentTarget.value });

  /** A findings filter offering known values and accepting any other (a template variable, a kind added later). */
  const filterSelect = (
    key: 'kind' | 'severity',
    options: Array<SelectableValue<string>>,
    width: number,
    placeholder: string
  ) => (
    <Select<string>
      inputId={`query-${key}`}
      width={width}
      options={options}
      allowCustomValue
      isClearable
      value={query[key] ? asOption(query[key]) : null}
      placeholder={placeholder}
      onChange={(v) => change({ [key]: v?.value ?? '' }, true)}
      onCreateOption={(v) => change({ [key]: v.trim() }, true)}
    />
  );

  const onLimitChange = (e: ChangeEvent<HTMLInputElement>) => {
    const n = Number(e.currentTarget.value);
    change({ limit: e.currentTarget.value.trim() === '' || !Number.isFinite(n) || n <= 0 ? undefined : Math.trunc(n) });
  };

  const loadSessions = useCallback(
    async (typed: string): Promise<Array<SelectableValue<string>>> => {
      const vars = typed.startsWith('$') || typed === '' ? variableOptions(typed) : [];
      if (typed.startsWith('$')) {
        return vars;
      }
      try {
        const sessions = await datasource.searchSessions(typed, range, onlyViolations);
        setSearchError(undefined);
        return [
          ...vars,
          ...sessions.map((s) => ({ label: s.session_id, value: s.session_id, description: describeSession(s) })),
        ];
      } catch (err: unknown) {
        const e = err as { data?: { error?: string; message?: string }; message?: string };
        setSearchError(e?.data?.error ?? e?.data?.message ?? e?.message ?? 'session search failed');
        return vars;
      }
    },
    [datasource, range, onlyViolations]
  );

  const limitField = (
    <InlineField
      label="Limit"
      labelWidth={LABEL_WIDTH}
      tooltip="Rows per frame for this query; it can only lower the data source's max rows. Empty: the data source's."
    >
      <Input
        id="query-limit"
        type="number"
        min={1}
        width={12}
        value={query.limit ?? ''}
        placeholder="max rows"
        onChange={onLimitChange}
        onBlur={onRunQuery}
      />
    </InlineField>
  );

  return (
    <div>
      <InlineFieldRow>
        <InlineField label="Query" labelWidth={LABEL_WIDTH}>
          <RadioButtonGroup<QueryType>
            options={QueryTypes}
            value={queryType}
            onChange={(v) => change({ queryType: v }, true)}
          />
        </InlineField>
      </InlineFieldRow>

      {queryType === 'story' && (
        <InlineFieldRow>
          <InlineField
            label="Session"
            labelWidth={LABEL_WIDTH}
            grow
            tooltip="The session id (Mcp-Session-Id). Type a prefix to search the sessions of the time range, newest first, or a $variable."
            invalid={!!searchError}
            error={searchError}
          >
            <AsyncSelect<string>
              inputId="query-session"
              // Remount when the search changes, so the first options are reloaded.
              key={`${onlyViolations}:${range?.from.valueOf()}:${range?.to.valueOf()}`}
              width={64}
              loadOptions={loadSessions}
              defaultOptions
              allowCustomValue
              isClearable
              value={query.session ? asOption(query.session) : null}
              placeholder="search sessions by id prefix"
              noOptionsMessage="no session of the time range starts so"
              onChange={(v) => change({ session: v?.value ?? '' }, true)}
              onCreateOption={(v) => change({ session: v.trim() }, true)}
            />
          </InlineField>
          <InlineField label="Frames" tooltip="Keep one frame of the story, for a panel that draws one (a state timeline of the epoch timeline)">
            <Select<StoryPart | ''>
              inputId="query-part"
              width={20}
              options={StoryParts}
              value={query.part ?? ''}
              onChange={(v) => change({ part: v.value ?? '' }, true)}
            />
          </InlineField>
          <InlineField label="With violations" tooltip="Search only sessions with at least one violation">
            <InlineSwitch
              id="query-only-violations"
              value={onlyViolations}
              onChange={(e) => setOnlyViolations(e.currentTarget.checked)}
            />
          </InlineField>
          {limitField}
        </InlineFieldRow>
      )}

      {queryType === 'findings' && (
        <>
          <InlineFieldRow>
            <InlineField label="Kind" labelWidth={LABEL_WIDTH} tooltip="The violation's kind (docs/catalogue.md). Empty: all.">
              {filterSelect('kind', kindOptions, 36, 'any kind')}
            </InlineField>
            <InlineField label="Severity" tooltip="Empty: all.">
              {filterSelect('severity', severityOptions, 20, 'any')}
            </InlineField>
          </InlineFieldRow>
          <InlineFieldRow>
            <InlineField label="Server" labelWidth={LABEL_WIDTH} tooltip="The MCP server as the agent records it (host:port). Empty: all.">
              <Input
                id="query-server"
                width={36}
                value={query.server ?? ''}
                placeholder="any server"
                onChange={text('server')}
                onBlur={onRunQuery}
              />
            </InlineField>
            <InlineField label="Client" tooltip="The MCP client (ip:port). Empty: all.">
              <Input
                id="query-client"
                width={24}
                value={query.client ?? ''}
                placeholder="any client"
                onChange={text('client')}
                onBlur={onRunQuery}
              />
            </InlineField>
            {limitField}
          </InlineFieldRow>
        </>
      )}

      {queryType === 'resumeHealth' && (
        <InlineFieldRow>
          <InlineField
            label="Server"
            labelWidth={LABEL_WIDTH}
            tooltip="Count only this server's resumes (host:port). Empty: all. One series per outcome: resumed, rejected_404, rejected_4xx, violated, unverifiable."
          >
            <Input
              id="query-server"
              width={36}
              value={query.server ?? ''}
              placeholder="any server"
              onChange={text('server')}
              onBlur={onRunQuery}
            />
          </InlineField>
        </InlineFieldRow>
      )}
    </div>
  );
}
