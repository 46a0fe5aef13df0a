# syntax=docker/dockerfile:1
#
# eddy container image: a static binary on distroless, running as nonroot.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse --short HEAD) -t eddy .
#   docker run --rm -p 127.0.0.1:9249:9249 -e EDDY_ADMIN_TOKEN=$(openssl rand -hex 16) \
#     -v $PWD/pipeline.yaml:/etc/eddy/pipeline.yaml:ro eddy
#   docker run --rm -e EDDY_OUT=/tmp -e EDDY_ADMIN_ADDR=off --no-healthcheck eddy run /etc/eddy/examples/quickstart.yaml
#
# The admin endpoint listens on every interface of the container, so eddy
# refuses to start (exit 2) without a bearer token in EDDY_ADMIN_TOKEN:
# savepoints, stops and pipeline uploads need "Authorization: Bearer
# $EDDY_ADMIN_TOKEN"; /healthz, /readyz and /metrics stay open.
#
# docker stop sends SIGTERM: eddy drains in-flight records, flushes its sinks
# and exits 0 (give it time with --stop-timeout / stop_grace_period).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=dev
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath \
      -ldflags "-s -w -X github.com/eddy-stream/eddy/cmd.Version=${VERSION} -X github.com/eddy-stream/eddy/cmd.Commit=${COMMIT}" \
      -o /out/eddy . \
 && /out/eddy version \
 && EDDY_DATA=/src/configs/data /out/eddy validate /src/configs/*.yaml

FROM gcr.io/distroless/static-debian12:nonroot
# Example pipelines and their data; point EDDY_DATA at examples/data to run
# sensors.yaml from anywhere.
COPY --from=build /src/configs/ /etc/eddy/examples/
COPY --from=build /out/eddy /eddy
# UID 65532 (nonroot) owns the working directory: relative paths of a
# pipeline file (out/, ./eddy-state) land there.
WORKDIR /home/nonroot
USER 65532:65532
# Mount a volume at the state directory to keep checkpoints across
# containers (-v eddy-state:/home/nonroot/eddy-state).
# The admin endpoint (/healthz, /readyz, /metrics, savepoints; GET / lists
# them) listens on every interface of the container on a fixed port, for
# probes and Prometheus; its state-changing requests need EDDY_ADMIN_TOKEN
# (docker run -e EDDY_ADMIN_TOKEN=...), without which eddy does not start.
# GODEBUG: freed heap goes back to the kernel lazily (docs/running.md,
# "Memory").
ENV EDDY_STATE_DIR=/home/nonroot/eddy-state \
    EDDY_DATA=/etc/eddy/examples/data \
    EDDY_ADMIN_ADDR=0.0.0.0:9249 \
    GODEBUG=madvdontneed=0
EXPOSE 9249
# The image has no curl or wget: eddy health asks GET /healthz of the
# address in EDDY_ADMIN_ADDR (exit 0 running or stopping, 1 otherwise).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["/eddy", "health"]
ENTRYPOINT ["/eddy"]
CMD ["run", "/etc/eddy/pipeline.yaml"]
