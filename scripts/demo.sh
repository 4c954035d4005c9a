#!/usr/bin/env bash
# `make demo`: the main job end to end on the embedded engines.
#   1. a real Kafka broker on 127.0.0.1 (ccab kafka up) and the warehouse schema (ccab db migrate)
#   2. simulate the canary-tyo1 PoP: per host, `ss -tinHOe` snapshots and an nginx access log
#   3. one real edge collector per simulated host (bin/ccab-collector run --once) parses them
#      and produces tcp_sample/1 and http_request/1 records to Kafka
#   4. the loader consumes them into ClickHouse until caught up (ccab loader --exit-when-idle)
#   5. the cohort rollups through Airflow (ccab dags test: dag.test() in its own process), the
#      per-arm comparison and the daily report with heatmaps, PDFs and CDFs
#   6. the judge's verdict per arm and the alerts (ccab verdicts, ccab alerts)
#   7. a rollout canary on the simulated PoP (scripts/demo-rollout.sh; DEMO_ROLLOUT=0 skips it):
#      the controller rolls back the arm that breaches a guardrail and promotes the one that passes
#   8. the canary report (ccab report, written last so it shows the look the rollout acted on) and
#      the Grafana dashboards (ccab dashboards build)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCAB_DATA_DIR=${CCAB_DATA_DIR:-$PWD/.ccab}
ccab=.venv/bin/ccab
SCENARIO=${DEMO_SCENARIO:-canary-tyo1}
HOURS=${DEMO_HOURS:-6}

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

banner "Kafka broker, warehouse service and schema"
$ccab kafka up
$ccab warehouse up   # the one owner of the embedded engine: every command below reaches it over HTTP
$ccab db migrate

banner "Simulate ${SCENARIO} (${HOURS} h): raw ss snapshots and nginx logs per host"
out="$CCAB_DATA_DIR/sim/$SCENARIO"
rm -rf "$out"
$ccab sim "$SCENARIO" --hours "$HOURS" --out "$out" --raw

banner "Edge collectors: one ccab-collector per simulated host -> Kafka"
brokers=${CCAB_KAFKA_BROKERS:-127.0.0.1:${CCAB_KAFKA_PORT:-19092}}
CCAB_COLLECTOR=bin/ccab-collector collectors/deploy/replay-sim.sh "$out" --output kafka --kafka-brokers "$brokers"
echo "collected $(find "$out/ss" -name '*.txt' | wc -l) ss snapshots and $(cat "$out"/nginx/*/access.log | wc -l) nginx lines from $(ls "$out/ss" | wc -l) hosts"

banner "Loader: Kafka -> ClickHouse (stops when caught up)"
$ccab loader --metrics-port 0 --exit-when-idle 5

banner "What landed"
$ccab query "SELECT * FROM (SELECT 'tcp_samples' AS table, count() AS rows FROM tcp_samples
             UNION ALL SELECT 'http_requests', count() FROM http_requests
             UNION ALL SELECT 'dead_letters', count() FROM dead_letters FINAL) ORDER BY table"
$ccab query "SELECT arm, any(cc) AS cc, uniqExact(host) AS hosts, uniqExact(sock_id) AS connections,
                    count() AS samples,
                    round(quantileExact(0.5)(retrans_pct), 2) AS median_retrans_pct_per_sample
             FROM tcp_samples GROUP BY arm ORDER BY arm"

banner "Client networks: the simulation's prefix metadata (CIDR -> ASN, country, access type)"
$ccab networks load "$out/networks.csv"
$ccab networks lookup "$(sed -n 3p "$out/networks.csv" | cut -d, -f1)" 203.0.113.0/24

banner "Cohorts: ccab_cohorts_hourly through Airflow (dag.test), then ccab_compare and the daily report"
read -r from to day_end < <($ccab query --format csv "SELECT formatDateTime(toStartOfHour(min(ts)), '%Y-%m-%dT%H:00Z'),
  formatDateTime(toStartOfHour(max(ts)) + INTERVAL 1 HOUR, '%Y-%m-%dT%H:00Z'),
  formatDateTime(toStartOfDay(max(ts)) + INTERVAL 1 DAY, '%Y-%m-%dT00:00Z') FROM tcp_samples" | tail -1 | tr -d '"\r' | tr ',' ' ')
$ccab dags test ccab_cohorts_hourly --from "$from" --to "$to"
$ccab dags test ccab_compare --from "$to" --to "${to%:00Z}:15Z"
$ccab dags test ccab_daily_report --from "$day_end" --to "${day_end%00:00Z}01:00Z"
reports="$CCAB_DATA_DIR/reports/${from%%T*}"
echo "heatmaps, PDFs, CDFs and summary.md:"
find "$reports" -maxdepth 3 -mindepth 2 -type d | sed 's/^/  /'

banner "Mobile vs fixed: queueing delay (srtt - min RTT) and goodput per access type x arm"
tf="${from/T/ }"; tf="${tf%Z}:00"; tt="${to/T/ }"; tt="${tt%Z}:00"
$ccab query "SELECT q.segment AS segment, q.arm AS arm, q.cc AS cc, q.n AS connections,
                    round(q.p50 / 1e3, 1) AS queue_delay_ms_p50, round(q.p90 / 1e3, 1) AS queue_delay_ms_p90,
                    round(g.p50 / 1e6, 2) AS goodput_mbps_p50
             FROM cohort_quantiles(pop = '', rollout_id = '', metric = 'queue_delay_us', segment = 'access:%',
                                   t_from = '$tf', t_to = '$tt') AS q
             LEFT JOIN cohort_quantiles(pop = '', rollout_id = '', metric = 'goodput_bps', segment = 'access:%',
                                        t_from = '$tf', t_to = '$tt') AS g ON g.segment = q.segment AND g.arm = q.arm
             WHERE q.segment IN ('access:mobile', 'access:fixed') ORDER BY segment, arm"
$ccab networks status | head -20

banner "Judge (ran inside ccab_compare): the verdict per arm and the alerts, as on-call reads them"
$ccab verdicts
$ccab alerts   # page and ticket; the informational findings: ccab alerts --severity info

if [ "${DEMO_ROLLOUT:-1}" = 1 ]; then
  banner "Rollout: controller -> Kafka -> simulated actuator -> data -> judge -> roll back / promote"
  scripts/demo-rollout.sh
fi

# The report comes last, so it shows the judge's newest look: after the rollout demo, the look the
# controller acted on (bbr1 rolled back, bbr2 promoted), and the same decisions the rollout printed.
banner "Canary report and Grafana dashboards"
rollout=$($ccab query --format csv "SELECT argMax(rollout_id, window_end) FROM judge_verdicts FINAL" | tail -1 | tr -d '"\r')
if [ -n "$rollout" ]; then
  $ccab report --rollout "$rollout"
  report_html="$CCAB_DATA_DIR/reports/$rollout/index.html"
else
  echo "no judge verdicts: skipped the canary report (run ccab analyze / ccab_compare first)"
  report_html=""
fi
$ccab dashboards build

banner "Done"
[ -n "$report_html" ] && echo "canary report: file://$report_html"
echo "Grafana dashboards: $PWD/dashboards/generated/*.json   provisioning: $PWD/dashboards/provisioning/ (dashboards/README.md)"
echo "warehouse: $CCAB_DATA_DIR/warehouse, served by ccab warehouse on 127.0.0.1:${CCAB_WAREHOUSE_PORT:-18123}   (ccab query \"SQL\"; tables: tcp_samples, http_requests, cohort_hourly, judge_results, alerts)"
echo "simulation truth: $out/truth.json"
echo "the broker and the warehouse service keep running: ccab kafka down and ccab warehouse down stop them"
