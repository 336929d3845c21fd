// Builds dist/ as Grafana loads a plugin: module.js, an AMD module whose
// dependencies (React, @grafana/*, rxjs, ...) are Grafana's own, given to it
// at load time (externals), and beside it plugin.json, the logo, README.md
// and CHANGELOG.md. After @grafana/create-plugin's .config/webpack, reduced
// to what this plugin uses (no CSS, images in code, workers or chunks).
//
//   webpack -c .config/webpack/webpack.config.js --env production
//   webpack -w -c .config/webpack/webpack.config.js --env development
const path = require('path');
const fs = require('fs');
const CopyWebpackPlugin = require('copy-webpack-plugin');

const ROOT = path.resolve(__dirname, '..', '..');
const SRC = path.join(ROOT, 'src');
const DIST = path.join(ROOT, 'dist');

const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const pluginJson = JSON.parse(fs.readFileSync(path.join(SRC, 'plugin.json'), 'utf8'));

// The day plugin.json's info.updated names: SOURCE_DATE_EPOCH when set
// (reproducible builds), else today.
const today = new Date(
  process.env.SOURCE_DATE_EPOCH ? Number(process.env.SOURCE_DATE_EPOCH) * 1000 : Date.now()
)
  .toISOString()
  .slice(0, 10);

// What Grafana provides to plugins (create-plugin's .config/bundler/externals.ts).
const externals = [
  'lodash',
  'jquery',
  'moment',
  'slate',
  'emotion',
  '@emotion/react',
  '@emotion/css',
  'prismjs',
  'slate-plain-serializer',
  '@grafana/slate-react',
  'react',
  'react/jsx-runtime',
  'react/jsx-dev-runtime',
  'react-dom',
  'react-redux',
  'redux',
  'rxjs',
  'i18next',
  'react-router',
  'd3',
  'angular',
  /^@grafana\/ui/i,
  /^@grafana\/runtime/i,
  /^@grafana\/data/i,
];

const logos = [...new Set([pluginJson.info?.logos?.small, pluginJson.info?.logos?.large].filter(Boolean))];

module.exports = (env = {}) => {
  const production = Boolean(env.production);
  return {
    context: SRC,
    mode: production ? 'production' : 'development',
    // Source maps are written beside module.js, with paths relative to
    // the plugin (webpack://replaywatch-sessions-datasource/./...).
    devtool: production ? 'source-map' : 'eval-source-map',
    entry: { module: './module.ts' },
    externals,
    module: {
      rules: [
        {
          test: /\.tsx?$/,
          exclude: /node_modules/,
          use: {
            loader: 'ts-loader',
            // Types are checked by `npm run typecheck` (tsc --noEmit).
            options: { transpileOnly: true, compilerOptions: { noEmit: false, sourceMap: true } },
          },
        },
      ],
    },
    output: {
      clean: {
        // The backend's binaries, built into dist/ by build.sh.
        keep: /(.*?_(amd64|arm(64)?)(\.exe)?|go_plugin_build_manifest)$/,
      },
      filename: '[name].js',
      library: { type: 'amd' },
      path: DIST,
      publicPath: `public/plugins/${pluginJson.id}/`,
      uniqueName: pluginJson.id,
      devtoolModuleFilenameTemplate: `webpack://${pluginJson.id}/[resource-path]`,
    },
    plugins: [
      new CopyWebpackPlugin({
        patterns: [
          {
            from: 'plugin.json',
            to: '.',
            transform: (content) =>
              content.toString().replace(/%VERSION%/g, pkg.version).replace(/%TODAY%/g, today),
          },
          { from: '../README.md', to: '.' },
          { from: '../CHANGELOG.md', to: '.' },
          ...logos.map((logo) => ({ from: logo, to: logo })),
        ],
      }),
    ],
    resolve: {
      extensions: ['.ts', '.tsx', '.js'],
    },
    performance: { hints: false },
  };
};
