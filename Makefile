# ruleop: the demo, the tests and the benchmarks. See README.md.
.PHONY: demo test unit bench soak measure-memory measure-writes measure-unsharded measure-console check generate control-plane image fuzz kubectl-plugin helm chromium

demo:            ## start the local control plane, run ruleop, show a Database reconciled
	scripts/demo.sh

test:            ## fmt, clippy, unit + snapshot + integration tests against the real control plane
	scripts/test-all.sh

unit:            ## the tests that need no control plane (lib, fixtures, CLI, RuleTest, ...): the fast loop
	scripts/unit.sh

measure-console: ## the web console's page times at CONSOLE_N (default 1000) parents (a measurement; docs/operations/console.md)
	bench/tool.sh console

check:           ## validate the shipped rules
	cargo run --quiet -- check --rules rules --templates templates

generate:        ## every generated file, in order: schemas, CLI and metrics references, the chart's ClusterRole, the kustomize install rendered from the chart (scripts/generate.sh lists them)
	scripts/generate.sh

bench:           ## convergence benchmark: ruleop vs a floor, kopf and kro (BENCH_N=100,1000; BENCH_N=10000 for the large run); see bench/README.md
	bench/run.sh

soak:            ## chaos soak (issue 29): SOAK_MINUTES (60) of faults over SOAK_PARENTS (1000) Databases, 3 sharded replicas; SOAK_SEED replays; bench/README.md
	$(if $(SOAK_PROFILE),BENCH_PROFILE=$(SOAK_PROFILE)) bench/tool.sh soak

measure-memory:  ## the operator's RSS over MEMORY_N (default 1000) converged Databases, and after a restart (a measurement, not a test)
	MIMALLOC_ALLOW_THP=0 MIMALLOC_PURGE_DELAY=0 bench/tool.sh memory

measure-writes:  ## the API server's writes for WRITES_N (default 100) Databases converging, then a template edit (a measurement)
	bench/tool.sh writes

measure-unsharded: ## one replica, no shards, over tests/it/exclusive/sharding.rs's 300 parents: time, writes, CPU, RSS (docs/operations/sharding.md)
	bench/tool.sh unsharded

control-plane:   ## build the control plane binary only
	tests/apiserver/ctl.sh build

chromium:        ## install Debian's chromium if missing (tests/it/ops/console.rs loads the console in it, headless)
	scripts/chromium.sh

helm:            ## build the pinned Helm from the Go module proxy into target/tools/ (make generate and tests/it/deploy/helm.rs use it)
	scripts/helm.sh --path

image:           ## container image without a daemon: static binary -> target/ruleop-image.tar (OCI archive)
	scripts/image.sh

fuzz:            ## cargo-fuzz every target for FUZZ_SECONDS (default 60) each; see docs/development/fuzzing.md
	scripts/fuzz.sh

kubectl-plugin:  ## build ruleop and link target/bin/kubectl-ruleop -> it: with target/bin on PATH, `kubectl ruleop trace ...` works
	cargo build --quiet
	mkdir -p target/bin
	ln -sf "$(abspath $(or $(CARGO_TARGET_DIR),target))/debug/ruleop" target/bin/kubectl-ruleop
	@echo "add $(CURDIR)/target/bin to PATH, then: kubectl ruleop trace database/NAME -n NS"
