// Package rules holds replaywatch's alerting as data, and the tests that keep
// it honest (rules/README.md):
//
//   - grafana/: Grafana alerting file provisioning (apiVersion 1): alert
//     rules on the findings in ClickHouse and on the agent's Prometheus
//     metrics, contact points (PagerDuty, Opsgenie, a webhook) and the
//     notification policy that routes them by severity;
//   - prometheus/: the agent's health as Prometheus alerting rules, with
//     promtool unit tests.
//
// The runbooks the rules link to are in docs/runbooks. The package has no
// code: its tests parse every file strictly, run every ClickHouse alert query
// on ClickHouse 26.x (embedded chDB) over seeded rows, and run promtool.
package rules
