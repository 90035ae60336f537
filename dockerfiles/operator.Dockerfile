# syntax=docker/dockerfile:1
# The kuberl operator: the control plane only, no torch (kept small on purpose).
# Build from the repository root: docker build -f dockerfiles/operator.Dockerfile .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kuberl
# Pinned dependencies first: this layer is rebuilt only when the pins change, not on every code edit.
COPY dockerfiles/operator-requirements.txt dockerfiles/
RUN /opt/kuberl/bin/pip install --no-cache-dir -r dockerfiles/operator-requirements.txt
COPY operator/ operator/
# With its operator extra, held to the pins above (tests/unit/test_dockerfiles.py checks they are the whole closure).
RUN /opt/kuberl/bin/pip install --no-cache-dir -c dockerfiles/operator-requirements.txt "./operator[operator]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kuberl-operator" \
      org.opencontainers.image.description="kopf operator for RLTrainingJob (kuberl.dev/v1alpha1)"
COPY --from=build /opt/kuberl /opt/kuberl
ENV PATH=/opt/kuberl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# A fixed non-root uid, the same the chart's securityContext runs as.
USER 65532:65532
EXPOSE 8080 8081
HEALTHCHECK NONE
ENTRYPOINT ["kuberl", "operator"]
