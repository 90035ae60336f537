# syntax=docker/dockerfile:1
# The kuberl trainer, CUDA build: torch from a CUDA index brings its CUDA runtime
# and NCCL as pinned nvidia-* wheels; the node provides only the driver.
# Build from the repository root:
#   docker build -f dockerfiles/trainer-cuda.Dockerfile --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX
ARG TORCH_VERSION=2.13.0+cu128
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN test -n "${TORCH_INDEX}" || { echo "set --build-arg TORCH_INDEX (e.g. https://download.pytorch.org/whl/cu128)"; exit 1; } \
 && python -m venv /opt/kuberl
COPY dockerfiles/trainer-requirements.txt dockerfiles/
RUN /opt/kuberl/bin/pip install --no-cache-dir -r dockerfiles/trainer-requirements.txt
# torch gets a layer of its own: gigabytes that change far less often than the small pins above.
# The build fails, not the first job, when the wheel lacks CUDA or NCCL.
# hadolint ignore=DL3059
RUN /opt/kuberl/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" -c dockerfiles/trainer-requirements.txt \
 && /opt/kuberl/bin/python -c "import torch, torch.distributed as dist; assert torch.version.cuda and dist.is_nccl_available(), 'torch without CUDA/NCCL'"
COPY operator/ operator/
COPY trainer/ trainer/
# kuberl without its operator extra: the trainer imports only the core.
RUN /opt/kuberl/bin/pip install --no-cache-dir --no-deps ./operator ./trainer

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kuberl-trainer-cuda" \
      org.opencontainers.image.description="kuberl DDP trainer (CUDA torch, NCCL)"
COPY --from=build /opt/kuberl /opt/kuberl
ENV PATH=/opt/kuberl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 65532:65532
HEALTHCHECK NONE
ENTRYPOINT ["python", "-m", "kuberl_trainer"]
