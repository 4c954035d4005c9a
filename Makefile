# ccab — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
export CCAB_DATA_DIR ?= $(CURDIR)/.ccab
PY := .venv/bin/python

.PHONY: bpf bpf-check setup demo test test-python test-system test-slow test-airflow test-go test-go-kernel test-fuzz test-prometheus bench clean help lab live-canary soak

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

setup:  ## install everything (venv, Go binaries, Kafka jars); idempotent
	@scripts/setup.sh

demo: setup  ## run the main job end to end on the embedded engines
	@scripts/demo.sh

test: setup bpf-check test-go test-python test-prometheus  ## set everything up, then the fast tier (budget 8 min): BPF objects current, Go unit tests, Python unit + engine (chdb), Prometheus rules

bpf:  ## regenerate the committed BPF objects and Go bindings from rollout/bpf/ (bpf2go, clang)
	@scripts/bpf-generate.sh

bpf-check:  ## the committed BPF objects are what rollout/bpf/ compiles to (CI)
	@scripts/bpf-generate.sh --check

test-go:  ## Go unit tests (-short: no kernel tests; fuzz targets on their seed corpora), two packages at a time
	@scripts/test-go.sh

test-go-kernel:  ## Go kernel tests (namespaces, BPF congestion controls, ccab-link packet counts), one package at a time; part of make test-system
	@scripts/test-go.sh --kernel

test-fuzz:  ## each Go fuzz target for FUZZTIME (default 100000x executions)
	@scripts/fuzz.sh

test-python:  ## Python unit + engine tests (pure code, chdb on shared worlds); the tiers: README "Tests"
	@scripts/pytest-tier.sh test-python "not system and not slow and not airflow_scheduler" -n $(TEST_WORKERS) --dist loadfile

test-system: setup  ## system tier, run by CI after make test: Go kernel tests, Go fuzzing, then real Kafka, Go binaries, Alertmanager, e2e, lab (SYSTEM_WORKERS files at a time; kernel-state tests one at a time)
	@scripts/test-go.sh --kernel
	@scripts/fuzz.sh
	@scripts/pytest-tier.sh test-system "system and not slow and not airflow_scheduler" -n $(SYSTEM_WORKERS) --dist loadgroup

test-slow: setup  ## slower tier, run by CI after make test-system: Kafka cluster leader kill, 1M-record and sharded loader SIGKILLs, Kafka outage replay, collector SIGKILL crash window, daily-rollup late rows, spillover through records (SLOW_WORKERS files at a time; kernel-state tests one at a time)
	@scripts/pytest-tier.sh test-slow "slow and not airflow_scheduler" -n $(SLOW_WORKERS) --dist loadgroup

test-airflow: setup  ## slower tier (~5 min quiet, ~15 min loaded): a real Airflow 3 scheduler runs ccab_cohorts_hourly
	@scripts/pytest-tier.sh test-airflow airflow_scheduler pipelines/tests/dags

live-canary:  ## root, ~30 min, not in make test: the controller service rolls back a lossy treatment and promotes a clean one on real sockets
	scripts/live-canary.sh

soak:  ## root, >= 30 min, not in make test: every service side by side (Kafka, warehouse, loader, controller, hourly job, analysts, Alertmanager, edge hosts) under seeded chaos; one table of goals (docs/soak.md)
	scripts/soak.sh

#: pytest-xdist workers of the fast tier (auto: one per core) and of the system and slow tiers (their
#: tests mostly wait on brokers, services and timers)
TEST_WORKERS ?= auto
SYSTEM_WORKERS ?= 2
SLOW_WORKERS ?= 2
PROMTOOL ?= promtool
AMTOOL ?= amtool
AM_CONFIG := deploy/prometheus/alertmanager.yml
test-prometheus:  ## check and unit-test deploy/prometheus/ (rules, scrape config, Alertmanager routes)
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { echo "test-prometheus: FAILED: promtool not found (Debian package 'prometheus'; make setup installs it as root)" >&2; exit 1; }
	@command -v $(AMTOOL) >/dev/null 2>&1 || { echo "test-prometheus: FAILED: amtool not found (Debian package 'prometheus-alertmanager'; make setup installs it as root)" >&2; exit 1; }
	$(PROMTOOL) check rules deploy/prometheus/rules/*.yml
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml
	cd deploy/prometheus/tests && $(PROMTOOL) test rules *.test.yml
	$(AMTOOL) check-config $(AM_CONFIG)
	$(AMTOOL) config routes test --config.file=$(AM_CONFIG) --verify.receivers=ccab-page severity=page rollout=r1 pop=tyo1 arm=bbr2
	$(AMTOOL) config routes test --config.file=$(AM_CONFIG) --verify.receivers=ccab-ticket severity=ticket component=collector
	$(AMTOOL) config routes test --config.file=$(AM_CONFIG) --verify.receivers=ccab-ticket alertname=Unlabelled

lab: setup  ## short runs of the five lab experiments (ccab-link paths) (root: network namespaces, nginx), with reports
	@for e in fairness size-fairness buffer-sweep loss-resilience cellular; do .venv/bin/ccab lab run lab/experiments/$$e.yaml --quick || exit 1; done

bench: setup  ## run the benchmarks in bench/ (each prints a ratio against a peer or the limit), then issue #19's table
	@set -o pipefail; out=$$(mktemp); status=0; \
	for b in bench/*/run.sh; do echo "== $$b"; bash $$b 2>&1 | tee -a $$out || status=1; done; \
	$(PY) bench/table19.py $$out; rm -f $$out; exit $$status

clean:  ## stop the local broker and warehouse service, remove the local data dir and built binaries (keeps the jar cache)
	-@[ -x .venv/bin/ccab ] && .venv/bin/ccab kafka down
	-@[ -x .venv/bin/ccab ] && .venv/bin/ccab warehouse down
	rm -rf .ccab bin
