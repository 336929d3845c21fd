import React, { ChangeEvent } from 'react';
import { DataSourcePluginOptionsEditorProps } from '@grafana/data';
import { Field, FieldSet, Input, SecretInput } from '@grafana/ui';

import {
  DEFAULT_DATABASE,
  DEFAULT_MAX_RANGE_DAYS,
  DEFAULT_MAX_ROWS,
  HARD_MAX_RANGE_DAYS,
  HARD_MAX_ROWS,
  ReplaywatchOptions,
  ReplaywatchSecureJsonData,
} from '../types';

type Props = DataSourcePluginOptionsEditorProps<ReplaywatchOptions, ReplaywatchSecureJsonData>;

// The checks the backend makes when it loads the settings
// (pkg/plugin/settings.go LoadSettings), shown before saving.
const HOST_PORT = /^(\[[^\]]+\]|[^:\s]+):(\d+)$/;
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

function addressError(address?: string): string | undefined {
  if (!address) {
    return 'Required: host:port of ClickHouse’s native protocol';
  }
  const port = HOST_PORT.exec(address)?.[2];
  if (port === undefined) {
    return 'Want host:port, e.g. clickhouse:9000';
  }
  const n = Number(port);
  return n >= 1 && n <= 65535 ? undefined : 'Want a port number from 1 to 65535, e.g. clickhouse:9000';
}

function databaseError(database?: string): string | undefined {
  return !database || IDENT.test(database) ? undefined : 'Want letters, digits and _';
}

function maxRowsError(n?: number): string | undefined {
  return n === undefined || (n >= 1 && n <= HARD_MAX_ROWS) ? undefined : `Want 1 to ${HARD_MAX_ROWS}`;
}

function maxRangeDaysError(n?: number): string | undefined {
  return n === undefined || (n >= 1 && n <= HARD_MAX_RANGE_DAYS) ? undefined : `Want 1 to ${HARD_MAX_RANGE_DAYS} days`;
}

/** A whole number from a number input; undefined when empty (the backend's default applies). */
function wholeNumber(text: string): number | undefined {
  if (text.trim() === '') {
    return undefined;
  }
  const n = Number(text);
  return Number.isFinite(n) ? Math.trunc(n) : undefined;
}

export function ConfigEditor({ options, onOptionsChange }: Props) {
  const { jsonData, secureJsonFields, secureJsonData } = options;

  const setJson = <K extends keyof ReplaywatchOptions>(key: K, value: ReplaywatchOptions[K]) =>
    onOptionsChange({ ...options, jsonData: { ...jsonData, [key]: value } });

  const text = (key: 'address' | 'database' | 'user') => (e: ChangeEvent<HTMLInputElement>) =>
    setJson(key, e.currentTarget.value.trim() || undefined);

  const num = (key: 'maxRows' | 'maxRangeDays') => (e: ChangeEvent<HTMLInputElement>) =>
    setJson(key, wholeNumber(e.currentTarget.value));

  const onPasswordChange = (e: ChangeEvent<HTMLInputElement>) =>
    onOptionsChange({ ...options, secureJsonData: { ...secureJsonData, password: e.currentTarget.value } });

  const onPasswordReset = () =>
    onOptionsChange({
      ...options,
      secureJsonFields: { ...secureJsonFields, password: false },
      secureJsonData: { ...secureJsonData, password: '' },
    });

  return (
    <>
      <FieldSet label="ClickHouse">
        <Field
          label="Address"
          description="host:port of ClickHouse’s native protocol (port 9000 unless changed), as Grafana’s server reaches it. Save & test checks the connection and the replaywatch schema version."
          required
          invalid={!!addressError(jsonData.address)}
          error={addressError(jsonData.address)}
        >
          <Input
            id="config-address"
            width={40}
            value={jsonData.address ?? ''}
            placeholder="clickhouse:9000"
            onChange={text('address')}
          />
        </Field>
        <Field
          label="Database"
          description={`The database the replaywatch agents write (replaywatch schema apply). Default: ${DEFAULT_DATABASE}.`}
          invalid={!!databaseError(jsonData.database)}
          error={databaseError(jsonData.database)}
        >
          <Input
            id="config-database"
            width={40}
            value={jsonData.database ?? ''}
            placeholder={DEFAULT_DATABASE}
            onChange={text('database')}
          />
        </Field>
        <Field
          label="User"
          description="A ClickHouse user that may read the database; the plugin only reads. Empty: ClickHouse’s default user."
        >
          <Input id="config-user" width={40} value={jsonData.user ?? ''} placeholder="default" onChange={text('user')} />
        </Field>
        <Field label="Password" description="Stored encrypted by Grafana and sent to the plugin’s backend only.">
          <SecretInput
            id="config-password"
            width={40}
            isConfigured={!!secureJsonFields?.password}
            value={secureJsonData?.password ?? ''}
            placeholder="password"
            onChange={onPasswordChange}
            onReset={onPasswordReset}
          />
        </Field>
      </FieldSet>
      <FieldSet label="Limits">
        <Field
          label="Max rows"
          description={`Rows one query reads per frame; past it the first rows are shown with a warning. A query’s own limit can only lower it. Default ${DEFAULT_MAX_ROWS}, at most ${HARD_MAX_ROWS}.`}
          invalid={!!maxRowsError(jsonData.maxRows)}
          error={maxRowsError(jsonData.maxRows)}
        >
          <Input
            id="config-max-rows"
            type="number"
            min={1}
            max={HARD_MAX_ROWS}
            width={20}
            value={jsonData.maxRows ?? ''}
            placeholder={String(DEFAULT_MAX_ROWS)}
            onChange={num('maxRows')}
          />
        </Field>
        <Field
          label="Max range (days)"
          description={`Queries over a longer time range are refused (so is a session search). Default ${DEFAULT_MAX_RANGE_DAYS}.`}
          invalid={!!maxRangeDaysError(jsonData.maxRangeDays)}
          error={maxRangeDaysError(jsonData.maxRangeDays)}
        >
          <Input
            id="config-max-range-days"
            type="number"
            min={1}
            max={HARD_MAX_RANGE_DAYS}
            width={20}
            value={jsonData.maxRangeDays ?? ''}
            placeholder={String(DEFAULT_MAX_RANGE_DAYS)}
            onChange={num('maxRangeDays')}
          />
        </Field>
      </FieldSet>
    </>
  );
}
