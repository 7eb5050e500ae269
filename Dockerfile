# Tether gateway image. Build: docker build -t tether .
# Run: docker run -p 8080:8080 -v tether-data:/var/lib/tether/.tether tether \
#        --upstream http://agent:9000 --conf /etc/tether/tether.toml
# It listens on all interfaces, so it refuses to start without [auth] (or
# allow_unauthenticated = true). The rules this file keeps are checked by
# tests/deploy/check_container.py (see the README).

FROM rust:1-bookworm AS build
# Pingora builds zlib-ng with cmake and a C compiler.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake gcc g++ libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tether

FROM debian:bookworm-slim
# A fixed, unprivileged user (the Kubernetes manifests run as the same 10001) owning the
# working directory, whose `.tether/` holds the default store and journal.
RUN groupadd --system --gid 10001 tether \
    && useradd --system --uid 10001 --gid tether --home-dir /var/lib/tether --no-create-home tether \
    && mkdir -p /var/lib/tether/.tether \
    && chown -R tether:tether /var/lib/tether
COPY --from=build /src/target/release/tether /usr/local/bin/tether
USER 10001:10001
WORKDIR /var/lib/tether
# A container's loopback is its own: listen where the published port arrives.
ENV TETHER_LISTEN=0.0.0.0:8080
# Sessions (SQLite) or the PostgreSQL outage journal: a fresh named volume takes this
# directory's ownership.
VOLUME ["/var/lib/tether/.tether"]
EXPOSE 8080
# `tether health` asks /readyz on the port TETHER_LISTEN names (no curl in the image).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 CMD ["tether", "health"]
ENTRYPOINT ["tether", "serve"]
