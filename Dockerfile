# Tether gateway image. Build: docker build -t tether .
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tether

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/tether tether && mkdir -p /var/lib/tether && chown tether /var/lib/tether
COPY --from=build /src/target/release/tether /usr/local/bin/tether
USER tether
WORKDIR /var/lib/tether
EXPOSE 8080
ENTRYPOINT ["tether", "serve"]
