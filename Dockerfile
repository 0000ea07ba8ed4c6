# Postwire in a container: Debian slim, the Node.js 24 that package.json pins (the npm `node` package, the same
# binary the tests run on), a non-root user, and the data directory on a volume.
#   docker build -t postwire .
#   docker run -p 3000:3000 -v postwire-data:/data postwire
# compose.yaml runs it on PostgreSQL as one API and one worker; docs/deployment.md says more.
ARG DEBIAN_IMAGE=debian:trixie-slim

FROM ${DEBIAN_IMAGE} AS build
# Debian's Node.js and npm only run `npm ci` here: the server runs on the Node.js 24 that this install brings.
RUN apt-get update \
  && apt-get install -y --no-install-recommends ca-certificates nodejs npm \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Behind a proxy that re-signs TLS, npm needs its CA: mount the file into the build and name it here. Only this
# stage sees it; the image does not keep it.
ARG NODE_EXTRA_CA_CERTS
# The dependencies first, in their own layer, so a change to the code alone does not download them again.
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY bin ./bin
COPY src ./src
COPY dashboard ./dashboard
COPY LICENSE README.md CHANGELOG.md ./

FROM ${DEBIAN_IMAGE}
# A fixed uid and gid, so that a volume or a bind mount can be given to the same owner on any host.
RUN groupadd --system --gid 10001 postwire \
  && useradd --system --uid 10001 --gid postwire --home-dir /data --no-create-home --shell /usr/sbin/nologin postwire \
  && install -d -o postwire -g postwire -m 0700 /data
# The code stays root's and read-only to the service: only /data is written.
COPY --from=build /app /app
# `node` and `postwire` on PATH, so that `docker exec … postwire keys create …` works as it does on a host.
RUN ln -s /app/node_modules/node/bin/node /usr/local/bin/node \
  && ln -s /app/bin/postwire.js /usr/local/bin/postwire
# HOST: reachable from outside the container. PORT is spelled out here because EXPOSE and HEALTHCHECK name it.
ENV NODE_ENV=production HOST=0.0.0.0 PORT=3000 POSTWIRE_DATA_DIR=/data
USER postwire
WORKDIR /data
VOLUME /data
EXPOSE 3000
# /readyz, not /healthz: ready means the database answers and its migrations are current, which is what an
# orchestrator (and compose's depends_on: service_healthy) must wait for; /healthz only says the process lives.
# A process started as `worker` serves no HTTP: compose.yaml turns this check off for it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.PORT}/readyz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["postwire"]
CMD ["serve"]
