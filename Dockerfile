# syntax=docker/dockerfile:1
#
# The replaywatch image: one static binary on distroless, run as the
# non-root user 65532. Needs BuildKit (the default builder since Docker 23):
#
#   docker build -t ghcr.io/replaywatch/replaywatch:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... --push .
#
# The Grafana plugin image, the target grafana-plugin (further down):
#
#   docker build --target grafana-plugin -t ghcr.io/replaywatch/replaywatch-grafana-plugin:0.1.0 .
#
# CAP_NET_RAW. The agent opens AF_PACKET sockets, which need CAP_NET_RAW.
# A container running as a non-root user loses every capability at exec
# unless the binary carries them: Kubernetes has no ambient capabilities,
# and capabilities.add only puts NET_RAW in the bounding set. So the binary
# gets the file capability cap_net_raw+ep here, in the builder (distroless
# has no setcap), and the pod adds NET_RAW so that the kernel may grant it
# (deploy/kubernetes/agent/daemonset.yaml explains the runtimes this needs).
#  - BuildKit's COPY --from keeps the security.capability attribute (it sets
#    extended attributes after ownership and mode; a chown would clear it),
#    and --chmod does not touch it. The classic builder and some other
#    builders (kaniko) drop it: check with `getcap` on an exported image.
#  - Build with a rootful builder: setcap under a user namespace (rootless
#    BuildKit) writes a namespaced capability that is void elsewhere.
#  - "e" (effective) means the kernel refuses to exec the binary where
#    NET_RAW is not in the bounding set, whatever the subcommand: keep
#    NET_RAW in every container that runs this image (Docker's default set
#    has it; deploy/kubernetes/clickhouse/schema-job.yaml adds it).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
RUN apt-get update \
	&& DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libcap2-bin \
	&& rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Pure Go (no cgo): the binary runs on distroless/static. Cross-compiled on
# the build machine's platform for each target platform.
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
	go build -trimpath -ldflags "-s -w" -o /out/replaywatch ./cmd/replaywatch
RUN setcap cap_net_raw+ep /out/replaywatch \
	&& getcap /out/replaywatch | grep -q cap_net_raw

# The Grafana plugin. The data source plugin replaywatch-sessions-datasource
# (dashboards/plugin) as Grafana loads it, the folder dashboards/plugin/build.sh
# puts in its zip, in an image of its own: busybox with the folder at
# /plugin/replaywatch-sessions-datasource. deploy/kubernetes/grafana's
# initContainer runs this image and copies the folder into Grafana's plugins
# directory (cp, hence busybox: the replaywatch image below is distroless,
# with no shell and no cp, and the Grafana image does not have the plugin).
# Its stages come before the replaywatch image's, which stays the last stage
# and so what a build without --target makes; that build does not run them.
#  - The frontend (module.js, plugin.json, img/, README.md, CHANGELOG.md) is
#    built once, on the build machine's platform: it is the same for every
#    target. npm ci installs exactly the committed package-lock.json (from
#    the npm registry). SOURCE_DATE_EPOCH, when given as a build argument,
#    is the day plugin.json's info.updated names (else the build's day).
#  - The backend gpx_replaywatch_linux_$TARGETARCH (named as build.sh names
#    it) is built on top of the Go stage above (same toolchain, sources and
#    caches), static, for the target platform only: a multi-platform build
#    gives each node the binary of its architecture.

FROM --platform=$BUILDPLATFORM node:20-bookworm AS plugin-frontend
ARG SOURCE_DATE_EPOCH
WORKDIR /src/dashboards/plugin
COPY dashboards/plugin/package.json dashboards/plugin/package-lock.json ./
RUN --mount=type=cache,target=/root/.npm \
	npm ci --no-audit --no-fund --loglevel=error
COPY dashboards/plugin/ ./
# As build.sh: the types checked, then webpack (production) into dist/.
RUN npm run typecheck && npm run build

FROM build AS plugin-backend
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 GOOS=linux GOARCH=$TARGETARCH \
	go build -trimpath -ldflags "-s -w" -o /out/plugin/gpx_replaywatch_linux_$TARGETARCH ./dashboards/plugin/pkg

FROM busybox:1.37.0 AS grafana-plugin
COPY --from=plugin-frontend /src/dashboards/plugin/dist/ /plugin/replaywatch-sessions-datasource/
COPY --from=plugin-backend --chmod=0755 /out/plugin/ /plugin/replaywatch-sessions-datasource/
# Grafana's user, as the initContainer runs it.
USER 472:472

# The replaywatch image: the last stage, what a build without --target makes.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build --chmod=0755 /out/replaywatch /usr/local/bin/replaywatch
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/replaywatch"]
CMD ["help"]
