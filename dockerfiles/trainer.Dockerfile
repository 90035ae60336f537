# syntax=docker/dockerfile:1
# The kuberl trainer, CPU build: torch from the CPU index, gloo for collectives.
# Build from the repository root:
#   docker build -f dockerfiles/trainer.Dockerfile --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu .
# TORCH_INDEX is required on purpose: an unpinned index on a build host pulls the multi-GB CUDA build.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX
ARG TORCH_VERSION=2.13.0+cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN test -n "${TORCH_INDEX}" || { echo "set --build-arg TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu)"; exit 1; } \
 && python -m venv /opt/kuberl
# Heaviest and slowest-changing layers first: pinned dependencies, then torch, then our code.
COPY dockerfiles/trainer-requirements.txt dockerfiles/
RUN /opt/kuberl/bin/pip install --no-cache-dir -r dockerfiles/trainer-requirements.txt
# torch gets a layer of its own: gigabytes that change far less often than the small pins above.
# hadolint ignore=DL3059
RUN /opt/kuberl/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" -c dockerfiles/trainer-requirements.txt
COPY operator/ operator/
COPY trainer/ trainer/
# kuberl without its operator extra: the trainer imports only the core.
RUN /opt/kuberl/bin/pip install --no-cache-dir --no-deps ./operator ./trainer

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kuberl-trainer" \
      org.opencontainers.image.description="kuberl DDP trainer (CPU torch)"
COPY --from=build /opt/kuberl /opt/kuberl
ENV PATH=/opt/kuberl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
HEALTHCHECK NONE
# The operator renders the command (python -m kuberl_trainer, or torch.distributed.run for several processes per pod).
ENTRYPOINT ["python", "-m", "kuberl_trainer"]
