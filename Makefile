# ruleop: the demo, the tests and the benchmarks. See README.md.
.PHONY: demo test bench check schema control-plane

demo:            ## start the local control plane, run ruleop, show a Database reconciled
	scripts/demo.sh

test:            ## fmt, clippy, unit + snapshot + integration tests against the real control plane
	scripts/test-all.sh

check:           ## validate the shipped rules
	cargo run --quiet -- check --rules rules --templates templates

schema:          ## regenerate schema/rule.schema.json
	cargo run --quiet -- schema > schema/rule.schema.json

control-plane:   ## build the control plane binary only
	tests/apiserver/ctl.sh build
