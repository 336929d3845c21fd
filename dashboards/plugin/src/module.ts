import { DataSourcePlugin } from '@grafana/data';

import { ConfigEditor } from './components/ConfigEditor';
import { QueryEditor } from './components/QueryEditor';
import { DataSource } from './datasource';
import { ReplaywatchOptions, ReplaywatchQuery } from './types';

export const plugin = new DataSourcePlugin<DataSource, ReplaywatchQuery, ReplaywatchOptions>(DataSource)
  .setConfigEditor(ConfigEditor)
  .setQueryEditor(QueryEditor);
