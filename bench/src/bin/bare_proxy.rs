//! The floor under Tether's pass-through: a Pingora reverse proxy with no hooks of its own
//! (no routing, authentication, limits or tee), built as Tether is (same Pingora, same
//! allocator, same thread count), so a benchmark can tell Pingora's cost from Tether's.

use async_trait::async_trait;
use clap::Parser;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
struct Args {
    /// Where to listen, as host:port.
    #[arg(long)]
    listen: String,
    /// The agent, as host:port.
    #[arg(long)]
    upstream: String,
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

struct Bare {
    upstream: String,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}

fn main() {
    let args = Args::parse();
    let conf = ServerConf {
        threads: args.threads,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = http_proxy_service(
        &server.configuration,
        Bare {
            upstream: args.upstream,
        },
    );
    proxy.add_tcp(&args.listen);
    server.add_service(proxy);
    server.run_forever();
}
